package assign

import (
	"maps"
	"slices"
	"sort"
	"time"
)

// Clone returns a deep copy of a that shares no memory with it.
func (a Assignment) Clone() Assignment {
	out := Assignment{Generation: a.Generation, Leaving: maps.Clone(a.Leaving)}
	if a.Tasks != nil {
		out.Tasks = make(map[string]*TaskAssignment, len(a.Tasks))
		slab := make([]TaskAssignment, len(a.Tasks))
		i := 0
		for id, t := range a.Tasks {
			if t == nil {
				out.Tasks[id] = nil
				continue
			}
			c := &slab[i]
			i++
			copyTask(c, t)
			out.Tasks[id] = c
		}
	}
	if a.Round != nil {
		r := *a.Round
		r.Tasks = slices.Clone(r.Tasks)
		out.Round = &r
	}
	return out
}

// copyTask makes dst a deep copy of src.
func copyTask(dst, src *TaskAssignment) {
	*dst = *src
	if src.Revoke != nil {
		r := *src.Revoke
		dst.Revoke = &r
	}
	if src.StandbyMove != nil {
		m := *src.StandbyMove
		dst.StandbyMove = &m
	}
	dst.Learners = slices.Clone(src.Learners)
	dst.Standbys = slices.Clone(src.Standbys)
}

// Roles lists, sorted, the tasks member is active for (including those being
// revoked from it), learning and standing by for.
func (a Assignment) Roles(member string) (active, learning, standby []string) {
	for id, t := range a.Tasks {
		if t == nil {
			continue
		}
		if t.Active == member {
			active = append(active, id)
		}
		for _, l := range t.Learners {
			if l.Member == member {
				learning = append(learning, id)
			}
		}
		if slices.Contains(t.Standbys, member) {
			standby = append(standby, id)
		}
	}
	sort.Strings(active)
	sort.Strings(learning)
	sort.Strings(standby)
	return active, learning, standby
}

// Revoking lists, sorted, the tasks member is active for and is asked to
// release: its worker should stop each, commit and call release.
func (a Assignment) Revoking(member string) []string {
	var out []string
	for id, t := range a.Tasks {
		if t != nil && t.Active == member && t.Revoke != nil {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Owns reports whether member is the active owner of any task, including one
// being revoked from it. A leaving member may shut down once it owns nothing.
func (a Assignment) Owns(member string) bool {
	for _, t := range a.Tasks {
		if t != nil && t.Active == member {
			return true
		}
	}
	return false
}

// Equal reports whether a and b describe the same state: the same
// generation, tasks, leaving times and round. The order of learners,
// standbys and round tasks does not matter, times compare with time.Equal,
// and a missing task equals a nil one.
func (a Assignment) Equal(b Assignment) bool {
	return a.Generation == b.Generation && sameState(a, b)
}

// sameState is Equal without the generation: whether a plan changed anything.
func sameState(a, b Assignment) bool {
	if !sameLeaving(a.Leaving, b.Leaving) || !sameRound(a.Round, b.Round) {
		return false
	}
	for id, t := range a.Tasks {
		if !sameTask(t, b.Tasks[id]) {
			return false
		}
	}
	for id, t := range b.Tasks {
		if _, ok := a.Tasks[id]; !ok && t != nil {
			return false
		}
	}
	return true
}

func sameLeaving(a, b map[string]time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for m, t := range a {
		u, ok := b[m]
		if !ok || !t.Equal(u) {
			return false
		}
	}
	return true
}

func sameRound(a, b *Round) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ID == b.ID && a.Started.Equal(b.Started) && sameStrings(a.Tasks, b.Tasks)
}

// sameTask compares two placements; nil equals nil only.
func sameTask(a, b *TaskAssignment) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Active != b.Active || a.Epoch != b.Epoch || a.Minted != b.Minted || a.HandoffSeq != b.HandoffSeq || !a.HandoffAt.Equal(b.HandoffAt) {
		return false
	}
	if (a.Revoke == nil) != (b.Revoke == nil) {
		return false
	}
	if a.Revoke != nil && (a.Revoke.Target != b.Revoke.Target || a.Revoke.Reason != b.Revoke.Reason || a.Revoke.Epoch != b.Revoke.Epoch || !a.Revoke.Since.Equal(b.Revoke.Since)) {
		return false
	}
	if (a.StandbyMove == nil) != (b.StandbyMove == nil) || a.StandbyMove != nil && *a.StandbyMove != *b.StandbyMove {
		return false
	}
	if !sameStrings(a.Standbys, b.Standbys) || len(a.Learners) != len(b.Learners) {
		return false
	}
	for _, l := range a.Learners {
		found := false
		for _, m := range b.Learners {
			if m.Member == l.Member && m.Since.Equal(l.Since) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// sameStrings compares two short lists as multisets.
func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	if slices.Equal(a, b) {
		return true
	}
	x, y := slices.Clone(a), slices.Clone(b)
	sort.Strings(x)
	sort.Strings(y)
	return slices.Equal(x, y)
}

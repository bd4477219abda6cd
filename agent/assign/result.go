package assign

import (
	"slices"
	"sort"
	"time"
)

// result assembles the Result: the next assignment, whether it differs
// from the current one, the moves by task, the members that may shut down
// and the next deadline.
func (p *planner) result() Result {
	if p.cfg.Handover == Stable {
		p.pruneRound()
	}
	changed := false
	next := Assignment{
		Generation: p.in.Current.Generation,
		Tasks:      make(map[string]*TaskAssignment, len(p.tasks)),
		Leaving:    p.leaving,
		Round:      p.round,
	}
	for i, t := range p.tasks {
		nt := p.next[i]
		if nt.Minted <= nt.Epoch {
			nt.Minted = 0 // nothing minted beyond the epoch in force
		}
		next.Tasks[t.ID] = nt
		if !changed && !sameTask(p.current[i], nt) {
			changed = true
		}
	}
	// A task removed from the config leaves a tombstone that keeps its
	// epoch: if it comes back, its next owner's epoch is still above every
	// epoch its changelog has seen, which activation requires.
	var removed []string
	for id, t := range p.in.Current.Tasks {
		if _, ok := p.taskIndex[id]; ok || t == nil {
			continue
		}
		tomb := &TaskAssignment{Epoch: t.Epoch, Minted: t.Minted}
		next.Tasks[id] = tomb
		if !sameTask(t, tomb) {
			removed = append(removed, id)
			changed = true
		}
	}
	sort.Strings(removed)
	for _, id := range removed {
		p.moves = append(p.moves, Move{Task: id, Kind: MoveUnassign, From: p.in.Current.Tasks[id].Active, Reason: reasonRemoved})
	}
	if !sameLeaving(p.in.Current.Leaving, next.Leaving) || !sameRound(p.in.Current.Round, next.Round) {
		changed = true
	}
	if changed {
		next.Generation++
	}
	slices.SortStableFunc(p.moves, func(a, b Move) int {
		switch {
		case a.Task < b.Task:
			return -1
		case a.Task > b.Task:
			return 1
		}
		return 0
	})
	return Result{
		Assignment:   next,
		Changed:      changed,
		Moves:        p.moves,
		Shutdown:     p.shutdown(),
		NextDeadline: p.nextDeadline(),
	}
}

// shutdown lists the leaving members that own no task, not even one being
// revoked from them.
func (p *planner) shutdown() []string {
	var out []string
	owners := map[string]bool{}
	for _, t := range p.next {
		if t.Active != "" {
			owners[t.Active] = true
		}
	}
	for _, m := range p.members {
		if m.leaving && !owners[m.id] {
			out = append(out, m.id)
		}
	}
	return out
}

// nextDeadline is the earliest time after now at which planning again with
// the same input would change something: a revoke's release timeout, a
// leaving member's leave timeout while it still owns stateful tasks that are
// not being revoked, or the end of a stable round's wait while some of its
// learners have caught up.
func (p *planner) nextDeadline() time.Time {
	var d time.Time
	consider := func(t time.Time) {
		if t.After(p.now) && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	rt := p.cfg.ReleaseTimeout.D()
	for i, t := range p.next {
		if t.Revoke != nil {
			consider(t.Revoke.Since.Add(rt))
			continue
		}
		if t.Active == "" || !p.tasks[i].Stateful {
			continue
		}
		if m := p.byID[t.Active]; m != nil && m.leaving && len(p.attached) > 0 {
			consider(p.leaveDeadline(m))
		}
	}
	if r := p.round; r != nil && !p.roundReady() {
		for _, id := range r.Tasks {
			if i := p.taskIndex[id]; p.next[i].Revoke == nil && p.learnerReady(i) {
				consider(r.Started.Add(p.cfg.StableMaxWait.D()))
				break
			}
		}
	}
	return d
}

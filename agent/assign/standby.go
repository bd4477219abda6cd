package assign

import (
	"cmp"
	"slices"
)

// placeStandbys keeps Config.Standbys warm copies of each owned stateful
// task that is not moving (see moving). Existing standbys stay (they are
// warm; cleanup trimmed any beyond Config.Standbys). Missing ones go to eligible members that are not the owner, a learner, the revoke
// target or a standby of the task, preferring in this order: a zone that the
// owner and the other standbys don't use, a member with local state (or the
// owner the task was just promoted away from), the member with the fewest
// standbys, the lower ID.
func (p *planner) placeStandbys() {
	want := max(p.cfg.Standbys, 0)
	for _, m := range p.members {
		m.standbys = 0
	}
	var short []int
	for i := range p.tasks {
		if !p.tasks[i].Stateful {
			continue
		}
		t := p.next[i]
		for _, s := range t.Standbys {
			p.byID[s].standbys++
		}
		if t.Active != "" && len(t.Standbys) < want && !p.moving(i) {
			short = append(short, i)
		}
	}
	if len(short) == 0 || len(p.eligible) == 0 {
		return
	}
	zp := newZonePicker(p.eligible)
	for _, i := range short {
		t := p.next[i]
		var used []string
		if owner := p.byID[t.Active]; owner != nil {
			used = append(used, owner.zone)
		}
		for _, s := range t.Standbys {
			used = append(used, p.byID[s].zone)
		}
		excluded := func(m *member) bool {
			return m.id == t.Active || p.hasStandby(i, m.id) || p.learnerOn(i, m.id) ||
				t.Revoke != nil && t.Revoke.Target == m.id
		}
		added := false
		for len(t.Standbys) < want {
			m := p.pickStandby(i, zp, excluded, used)
			if m == nil {
				break
			}
			t.Standbys = append(t.Standbys, m.id)
			used = append(used, m.zone)
			zp.add(m)
			added = true
			p.move(i, MoveStandbyAdd, t.Active, m.id, reasonStandbys)
		}
		if added {
			slices.Sort(t.Standbys)
		}
	}
}

// moving reports whether task i is on its way to another member. Its
// standbys are topped up once it arrives: until then its learner or
// standby target is a warm copy for failover, and a stable set of standbys
// keeps the move's destination from shifting between plans.
func (p *planner) moving(i int) bool {
	t := p.next[i]
	return t.Revoke != nil || p.dest[i] != nil && p.dest[i].id != t.Active
}

// trimStandbys keeps want of task i's standbys: the revoke target first,
// then the lowest lag, then the lowest ID.
func (p *planner) trimStandbys(i, want int) {
	t := p.next[i]
	target := ""
	if t.Revoke != nil {
		target = t.Revoke.Target
	}
	order := slices.Clone(t.Standbys)
	slices.SortStableFunc(order, func(a, b string) int {
		if (a == target) != (b == target) {
			return boolFirst(a == target)
		}
		return cmp.Compare(p.lag(i, a), p.lag(i, b))
	})
	for _, s := range order[want:] {
		p.move(i, MoveStandbyDrop, t.Active, s, reasonTooMany)
	}
	kept := order[:want]
	slices.Sort(kept)
	t.Standbys = nilIfEmpty(kept)
}

// pickStandby chooses a new standby for task i (see placeStandbys), or nil.
func (p *planner) pickStandby(i int, zp *zonePicker, excluded func(*member) bool, used []string) *member {
	warm := func(unusedZone bool) *member {
		var best *member
		consider := func(m *member) {
			if m == nil || !m.eligible || excluded(m) || unusedZone && slices.Contains(used, m.zone) {
				return
			}
			if best == nil || standbyLess(m, best) {
				best = m
			}
		}
		consider(p.demoted[i])
		for _, e := range p.pos.of(i) {
			consider(e.m)
		}
		return best
	}
	if m := warm(true); m != nil {
		return m
	}
	if m := zp.pick(excluded, used, false); m != nil {
		return m
	}
	if m := warm(false); m != nil {
		return m
	}
	return zp.pick(excluded, used, true)
}

// standbyLess orders standby candidates: fewest standbys, then ID.
func standbyLess(a, b *member) bool {
	if a.standbys != b.standbys {
		return a.standbys < b.standbys
	}
	return a.id < b.id
}

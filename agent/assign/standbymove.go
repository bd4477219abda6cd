package assign

import (
	"cmp"
	"slices"
)

// moveStandbys starts standby moves off each member above its standby
// quota (its standbys in tasks that are not already moving one count),
// trying its tasks from the highest ID down until one has a member with
// room to take the copy, as many as it is above. If that starts nothing in
// a group where no task and no standby is moving, one member still above
// its quota sheds a copy through a middle member (see shedThroughMiddle).
func (p *planner) moveStandbys(stateful []int, want int) {
	excess := map[*member]int{}
	var over []*member
	for _, m := range p.eligible {
		if m.standbys > m.squota {
			excess[m] = m.standbys - m.squota
		}
	}
	if len(excess) == 0 {
		return
	}
	on := map[*member][]int{}
	settled := true
	for _, i := range stateful {
		t := p.next[i]
		if p.moving(i) {
			settled = false
			continue
		}
		inFlight := len(t.Standbys) > p.need[i]
		settled = settled && !inFlight
		for _, s := range t.Standbys {
			m := p.byID[s]
			if _, ok := excess[m]; !ok {
				continue
			}
			if inFlight {
				excess[m]-- // being resolved by that move
				continue
			}
			on[m] = append(on[m], i)
		}
	}
	for _, m := range p.eligible {
		if excess[m] > 0 && len(on[m]) > 0 {
			over = append(over, m)
		}
	}
	if len(over) == 0 {
		return
	}
	budget := p.buildBudget()
	zp := newZonePicker(p.eligible)
	for _, m := range over {
		tasks := on[m]
		// A copy placed in this plan is not warm yet: it is simply
		// placed again. A copy from before moves warm.
		for j := len(tasks) - 1; j >= 0 && excess[m] > 0; j-- {
			if i := tasks[j]; !p.wasStandby(i, m.id) && p.replaceStandby(i, m, zp) {
				excess[m]--
				settled = false
			}
		}
		for j := len(tasks) - 1; j >= 0 && excess[m] > 0; j-- {
			i := tasks[j]
			if len(p.next[i].Standbys) > p.need[i] {
				continue // one move at a time per task
			}
			if p.wasStandby(i, m.id) && p.startStandbyMove(i, m.id, zp, budget) {
				excess[m]--
				settled = false
			}
		}
	}
	if !settled {
		return
	}
	// A member that could move a copy straight on waits for the learner
	// bounds instead.
	room := p.withRoom()
	var chains map[*member][]int
	for _, m := range over {
		warm := slices.DeleteFunc(slices.Clone(on[m]), func(i int) bool { return !p.wasStandby(i, m.id) })
		if excess[m] == 0 || p.canPassOn(m, warm, room) {
			continue
		}
		if chains == nil {
			chains = p.settledStandbys(stateful)
		}
		if p.shedThroughMiddle(m, chains, zp, budget) {
			return // one at a time: its end needs the group quiet
		}
	}
}

// replaceStandby moves task i's standby on m, placed in this plan, to a
// member with room; it reports whether it did.
func (p *planner) replaceStandby(i int, from *member, zp *zonePicker) bool {
	t := p.next[i]
	used := p.zonesUsed(i, from.id)
	m := p.pickStandby(i, zp, p.standbyExcluded(i), used, false)
	if m == nil || m.standbys >= m.squota || slices.Contains(used, m.zone) && !slices.Contains(used, from.zone) {
		return false
	}
	t.Standbys[slices.Index(t.Standbys, from.id)] = m.id
	slices.Sort(t.Standbys)
	from.standbys--
	zp.add(m)
	for j := range p.moves {
		if mv := &p.moves[j]; mv.Task == p.tasks[i].ID && mv.Kind == MoveStandbyAdd && mv.To == from.id {
			mv.To = m.id
			break
		}
	}
	return true
}

// standbyInFlight reports whether a task has a standby move to finish.
func (p *planner) standbyInFlight(stateful []int, want int) bool {
	for _, i := range stateful {
		if !p.moving(i) && len(p.next[i].Standbys) > p.need[i] {
			return true
		}
	}
	return false
}

// finishStandbyMove trims task i, which has more standbys than need, once
// the copies it keeps have caught up: those on the members most above their
// quota go first, then the highest lag. It waits while a kept copy is still
// being built and, if strict, while the last copy kept and the first
// dropped are on members equally above their quota. When settled is given
// (this is the only standby move and no task is moving; it lists the
// settled standbys, see settledStandbys), a tie above the quota between
// those two copies drops the one on a member that cannot pass another copy
// straight on to a member with room: that ends the first move through a
// middle member (see shedThroughMiddle).
func (p *planner) finishStandbyMove(i, need int, strict bool, settled func() map[*member][]int) {
	t := p.next[i]
	order := slices.Clone(t.Standbys)
	excess := func(s string) int { m := p.byID[s]; return m.standbys - m.squota }
	slices.SortStableFunc(order, func(a, b string) int {
		if c := cmp.Compare(excess(a), excess(b)); c != 0 {
			return c // the member most above its quota loses its copy
		}
		return cmp.Compare(p.lag(i, a), p.lag(i, b))
	})
	if need > 0 && excess(order[need]) > 0 && excess(order[need-1]) == excess(order[need]) && settled != nil {
		keep, drop := p.byID[order[need-1]], p.byID[order[need]]
		on, room := settled(), p.withRoom()
		if !p.canPassOn(keep, on[keep], room) && p.canPassOn(drop, on[drop], room) {
			order[need-1], order[need] = order[need], order[need-1]
		}
	}
	for _, s := range order[:need] {
		if !p.caughtUp(i, s) {
			return
		}
	}
	if strict && need > 0 && excess(order[need-1]) == excess(order[need]) {
		return
	}
	for _, s := range order[need:] {
		reason := reasonTooMany
		if m := p.byID[s]; m.standbys > m.squota {
			reason = reasonBalance
		}
		p.move(i, MoveStandbyDrop, t.Active, s, reason)
		p.byID[s].standbys--
	}
	kept := order[:need]
	slices.Sort(kept)
	t.Standbys = nilIfEmpty(kept)
}

// startStandbyMove builds a new standby of task i on a member with room,
// to replace the standby on member gone once it has caught up, if the
// learner bounds leave room for one more copy being built. It reports
// whether it did.
func (p *planner) startStandbyMove(i int, gone string, zp *zonePicker, budget *buildBudget) bool {
	t := p.next[i]
	used := p.zonesUsed(i, gone)
	from := p.byID[gone]
	excluded := p.standbyExcluded(i)
	m := p.pickStandby(i, zp, excluded, used, false)
	if m == nil || m.standbys >= m.squota {
		return false
	}
	if slices.Contains(used, m.zone) && !slices.Contains(used, from.zone) {
		return false // the move would lose a zone
	}
	if !budget.take(m) {
		return false
	}
	t.Standbys = append(t.Standbys, m.id)
	slices.Sort(t.Standbys)
	zp.add(m)
	p.move(i, MoveStandbyAdd, t.Active, m.id, reasonBalance)
	return true
}

// buildBudget is what the learner bounds leave for standbys being built.
type buildBudget struct {
	p     *planner
	total int
}

func (p *planner) buildBudget() *buildBudget { return &buildBudget{p: p, total: -1} }

// count counts, the first time a build is asked for, the standbys being
// built (not caught up) on each member and in all.
func (b *buildBudget) count() {
	if b.total >= 0 {
		return
	}
	p := b.p
	b.total = p.learnerTotal
	for _, m := range p.members {
		m.building = 0
	}
	for i := range p.tasks {
		for _, s := range p.next[i].Standbys {
			if !p.caughtUp(i, s) {
				p.byID[s].building++
				b.total++
			}
		}
	}
}

// take reserves one standby build on m, if the bounds allow.
func (b *buildBudget) take(m *member) bool {
	cfg := b.p.cfg
	if cfg.MaxLearners <= 0 && cfg.MaxLearnersPerMember <= 0 {
		return true
	}
	b.count()
	if cfg.MaxLearners > 0 && b.total >= cfg.MaxLearners {
		return false
	}
	if cfg.MaxLearnersPerMember > 0 && m.learners+m.building >= cfg.MaxLearnersPerMember {
		return false
	}
	b.total++
	m.building++
	return true
}

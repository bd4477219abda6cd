package assign

import "slices"

// placeStandbys keeps Config.Standbys warm copies of each owned stateful
// task on eligible members other than its owner (members whose worker is
// detached or lost included: they may hold warm copies). It computes the
// standby target once (see standbyTarget) and moves each task's standbys
// towards it (see towardsTarget).
func (p *planner) placeStandbys() {
	for _, t := range p.next {
		if mv := t.StandbyMove; mv != nil && (mv.From == mv.To || !slices.Contains(t.Standbys, mv.From) || !slices.Contains(t.Standbys, mv.To)) {
			t.StandbyMove = nil // a copy of the move is gone: the other is a plain standby
		}
	}
	s := p.standbyTarget()
	if s == nil {
		return
	}
	budget := &buildBudget{p: p, total: -1}
	for _, i := range s.tasks {
		s.towardsTarget(i, budget)
	}
}

// towardsTarget moves task i's standbys one step towards the target, by
// one rule: a new copy is added before the copy it replaces is dropped.
//
//   - Standbys missing (a member died or left, a task is new) are added
//     at once, from the target; those of a task that is moving only when
//     this plan cost the task a zone (else it is topped up when it
//     arrives, so that its destination does not shift between plans).
//   - A standby move in flight (TaskAssignment.StandbyMove) ends when the
//     copies the task keeps have caught up: the replaced copy is dropped.
//     If the target wants the replaced copy back instead of the new one,
//     the new one is dropped; if the task has no copy to spare (one was
//     lost, or it may have more), both stay, plain standbys; if the
//     replaced copy is to become the owner, its promotion ends the move.
//   - Standbys beyond what the task can have (fewer members, a lower
//     Config.Standbys) are dropped, those the target does not want first,
//     once the copies it keeps have caught up unless two or more are over
//     (a move's two copies count as one; the move gives way if nothing
//     else is left to drop, and the planned owner's copy is never
//     dropped).
//   - Else, if the task stays where it is and its standbys differ from the
//     target, one copy the target wants is added to replace one it does
//     not want, the pair that spans the most zones: a standby move. It
//     waits for room under the learner bounds, unless this plan cost the
//     task a zone (a promotion, a member leaving) and the move wins it
//     back.
//
// Nothing else is dropped: a task never has fewer warm copies than
// configured while a copy moves, and one move per task runs at a time.
func (s *standbyTarget) towardsTarget(i int, budget *buildBudget) {
	p, t := s.p, s.p.next[i]
	wanted := func(id string) bool {
		return slices.ContainsFunc(s.copies[i], func(m *member) bool { return m.id == id })
	}
	mv := s.moveOf(i)
	missing := s.need[i] - len(t.Standbys) + b2i(mv != nil)
	if s.fixed[i] && s.span(i, nil, nil) >= p.startSpan(i) {
		// Topped up when it arrives: a stable set of standbys keeps a
		// move's destination from shifting between plans.
		missing = 0
	}
	for _, m := range s.copies[i] {
		if missing > 0 && !p.hasStandby(i, m.id) {
			p.addStandby(i, m, reasonStandbys)
			missing--
		}
	}
	if mv == nil && t.StandbyMove != nil && p.changed(i) {
		t.StandbyMove = nil // both copies are plain standbys now
	}
	for {
		extra := len(t.Standbys) - s.need[i] - b2i(mv != nil)
		if extra <= 0 {
			break
		}
		var unwanted, rest []*member
		for _, id := range t.Standbys {
			switch m := p.byID[id]; {
			case m == s.holder[i] || mv != nil && (id == mv.From || id == mv.To):
			case wanted(id):
				rest = append(rest, m)
			default:
				unwanted = append(unwanted, m)
			}
		}
		drop := append(s.dropOrder(i, unwanted), s.dropOrder(i, rest)...)
		if len(drop) < extra {
			if mv == nil {
				break // what is left is the planned owner's copy
			}
			p.dropStandby(i, mv.To, reasonTooMany) // the move gives way
			t.StandbyMove, mv = nil, nil
			continue
		}
		if extra == 1 && mv == nil && !p.othersCaughtUp(i, drop[0].id) {
			return
		}
		for _, m := range drop[:extra] {
			p.dropStandby(i, m.id, reasonTooMany)
		}
		if mv == nil {
			return
		}
		break
	}
	if mv != nil {
		switch {
		case p.byID[mv.From] == s.holder[i] || t.Revoke != nil && t.Revoke.Target == mv.From:
			return // the replaced copy is to become the owner: its promotion ends the move
		case wanted(mv.From) && !wanted(mv.To):
			p.dropStandby(i, mv.To, reasonNotNeeded)
		case p.othersCaughtUp(i, mv.From):
			p.dropStandby(i, mv.From, reasonBalance)
		default:
			return
		}
		t.StandbyMove = nil
		return
	}
	if s.fixed[i] {
		return
	}
	from, to, span := s.pair(i)
	now := s.span(i, nil, nil)
	if to == nil || !(now < p.startSpan(i) && span > now) && !budget.take(to) {
		return
	}
	reason := reasonBalance
	if span > now {
		reason = reasonZones
	}
	p.addStandby(i, to, reason)
	t.StandbyMove = &StandbyMove{From: from.id, To: to.id}
}

// pair picks a standby move of task i: a copy the target wants and one it
// does not want that it would replace, the pair whose copies span the most
// zones, then in the target's and drop order. to is nil if there is none.
func (s *standbyTarget) pair(i int) (from, to *member, span int) {
	var adds, drops []*member
	for _, m := range s.copies[i] {
		if !s.p.hasStandby(i, m.id) {
			adds = append(adds, m)
		}
	}
	for _, id := range s.p.next[i].Standbys {
		if m := s.p.byID[id]; !slices.Contains(s.copies[i], m) {
			drops = append(drops, m)
		}
	}
	span = -1
	for _, a := range adds {
		for _, d := range s.dropOrder(i, drops) {
			if n := s.span(i, d, a); n > span {
				from, to, span = d, a, n
			}
		}
	}
	return from, to, span
}

// span counts the zones of task i's copies (its owner and standbys), with
// drop's copy dropped and add's added (each may be nil).
func (s *standbyTarget) span(i int, drop, add *member) int {
	t := s.p.next[i]
	ids := append(append([]string{t.Active}, t.Standbys...), "")
	if add != nil {
		ids[len(ids)-1] = add.id
	}
	return s.p.zonesOf(ids, func(id string) bool { return drop != nil && id == drop.id })
}

// startSpan counts the zones of task i's copies in the current assignment
// on live members.
func (p *planner) startSpan(i int) int {
	t := p.current[i]
	if t == nil {
		return 0
	}
	return p.zonesOf(append([]string{t.Active}, t.Standbys...), func(string) bool { return false })
}

// zonesOf counts the zones of the live members in ids, skipping those for
// which skip is true.
func (p *planner) zonesOf(ids []string, skip func(string) bool) int {
	var seen []int
	for _, id := range ids {
		if m := p.byID[id]; m != nil && !skip(id) && !slices.Contains(seen, m.zone) {
			seen = append(seen, m.zone)
		}
	}
	return len(seen)
}

// changed reports whether this plan recorded a move of task i.
func (p *planner) changed(i int) bool {
	return slices.ContainsFunc(p.moves, func(m Move) bool { return m.Task == p.tasks[i].ID })
}

// othersCaughtUp reports whether task i's standbys other than except have
// caught up.
func (p *planner) othersCaughtUp(i int, except string) bool {
	for _, s := range p.next[i].Standbys {
		if s != except && !p.caughtUp(i, s) {
			return false
		}
	}
	return true
}

func (p *planner) addStandby(i int, m *member, reason string) {
	t := p.next[i]
	t.Standbys = append(t.Standbys, m.id)
	slices.Sort(t.Standbys)
	p.move(i, MoveStandbyAdd, t.Active, m.id, reason)
}

func (p *planner) dropStandby(i int, id, reason string) {
	t := p.next[i]
	t.Standbys = nilIfEmpty(slices.DeleteFunc(t.Standbys, func(s string) bool { return s == id }))
	p.move(i, MoveStandbyDrop, t.Active, id, reason)
}

// buildBudget is what the learner bounds leave for standbys being built:
// they count after the learners, a standby being built being one that has
// not caught up.
type buildBudget struct {
	p        *planner
	total    int   // learners and standbys being built; -1 until counted
	building []int // by member index
}

// take reserves one standby build on m, if the bounds allow.
func (b *buildBudget) take(m *member) bool {
	p, cfg := b.p, b.p.cfg
	if cfg.MaxLearners <= 0 && cfg.MaxLearnersPerMember <= 0 {
		return true
	}
	if b.total < 0 {
		b.total, b.building = p.learnerTotal, make([]int, len(p.members))
		for i, t := range p.next {
			for _, s := range t.Standbys {
				if !p.caughtUp(i, s) {
					b.building[p.byID[s].index]++
					b.total++
				}
			}
		}
	}
	if cfg.MaxLearners > 0 && b.total >= cfg.MaxLearners ||
		cfg.MaxLearnersPerMember > 0 && p.learnersOn[m.index]+b.building[m.index] >= cfg.MaxLearnersPerMember {
		return false
	}
	b.total++
	b.building[m.index]++
	return true
}

package assign

import "slices"

// placeStandbys keeps Config.Standbys warm copies of each owned stateful
// task on eligible members other than its owner (those whose worker is
// detached or lost included). It computes the standby target once (see
// standbyTarget) and moves each task's standbys towards it by one rule: a
// new copy is added before the copy it replaces is dropped.
//
//   - Missing standbys are added at once, from the target, those spanning
//     the most zones first; a moving task's only if this plan cost it a
//     zone (else when it arrives, so that its destination stays put).
//   - A standby move in flight (TaskAssignment.StandbyMove) ends once the
//     copies the task keeps have caught up: the replaced copy is dropped.
//     If the target wants that copy back rather than the new one, the new
//     one is dropped; if that copy is to become the owner, the promotion
//     ends the move.
//   - Standbys beyond what a task can have (fewer members, a lower
//     Config.Standbys) are dropped, those the target does not want (never
//     the planned owner's); a single one only once the copies kept have caught up and no stateful
//     task is moving (it may be where one goes).
//   - Else, if the task stays put and its standbys are not the target's,
//     one the target wants is added to replace one it does not (the pair
//     spanning the most zones): a standby move. One that gains no zone
//     waits until no stateful task is moving or was just activated (the
//     copies axis follows where tasks end). It waits for room under the learner bounds, as
//     standbys being built count against them after the learners, unless
//     it wins back a zone this plan cost the task (a promotion, a member
//     leaving).
//
// Nothing else is dropped: a task never has fewer warm copies than
// configured while one moves, and one move per task runs at a time.
func (p *planner) placeStandbys() {
	for _, t := range p.next {
		if mv := t.StandbyMove; mv != nil && (mv.From == mv.To || !slices.Contains(t.Standbys, mv.From) || !slices.Contains(t.Standbys, mv.To)) {
			t.StandbyMove = nil // one of its copies is gone, and the move with it
		}
	}
	s := p.standbyTarget()
	if s == nil {
		return
	}
	var building []int // by member index, counted when a move first asks
	total := p.learnerTotal
	build := func(m *member, anyway bool) bool {
		if building == nil {
			building = make([]int, len(p.members))
			for i, t := range p.next {
				for _, id := range t.Standbys {
					if !p.caughtUp(i, id) {
						building[p.byID[id].index]++
						total++
					}
				}
			}
		}
		if !anyway && (p.cfg.MaxLearners > 0 && total >= p.cfg.MaxLearners ||
			p.cfg.MaxLearnersPerMember > 0 && p.learnersOn[m.index]+building[m.index] >= p.cfg.MaxLearnersPerMember) {
			return false
		}
		total, building[m.index] = total+1, building[m.index]+1
		return true
	}
	for _, i := range s.tasks {
		s.towardsTarget(i, build)
	}
}

// towardsTarget moves task i's standbys one step towards the target (see
// placeStandbys); build reserves room under the learner bounds.
func (s *standbyTarget) towardsTarget(i int, build func(m *member, anyway bool) bool) {
	p, t, c, mv := s.p, s.p.next[i], &s.task[i], s.moveOf(i)
	wanted := func(id string) bool { return slices.Contains(c.copies, p.byID[id]) }
	start := func() int { // the zones of its copies at the start of the plan
		if ct := p.current[i]; ct != nil {
			return p.span(ct.Active, ct.Standbys, nil, nil)
		}
		return 0
	}
	for add, _ := s.pair(i, nil); add != nil && len(t.Standbys) < c.need+b2i(mv != nil) && (!c.fixed || s.span(i, nil, nil) < start()); add, _ = s.pair(i, nil) {
		p.addStandby(i, add, reasonStandbys) // counted if a move asks for room
	}
	if mv == nil && t.StandbyMove != nil && slices.ContainsFunc(p.moves, func(m Move) bool { return m.Task == p.tasks[i].ID }) {
		t.StandbyMove = nil // no copy to spare: both are plain standbys now
	}
	var buf [4]*member
	unwanted := buf[:0]
	for _, id := range t.Standbys {
		if m := p.byID[id]; !wanted(id) && m != c.holder {
			unwanted = append(unwanted, m)
		}
	}
	unwanted = s.dropOrder(i, unwanted)
	switch extra := len(t.Standbys) - c.need; {
	case extra > b2i(mv != nil):
		if drop := unwanted[:min(extra, len(unwanted))]; len(drop) > 0 && (extra > 1 || s.tasksAtRest && p.othersCaughtUp(i, drop[0].id)) {
			for _, m := range drop {
				p.dropStandby(i, m.id, reasonTooMany)
			}
			t.StandbyMove = nil
		}
	case mv != nil && p.byID[mv.From] == c.holder:
		// The replaced copy is to become the owner: its promotion ends the move.
	case mv != nil && wanted(mv.From) && !wanted(mv.To):
		p.dropStandby(i, mv.To, reasonNotNeeded)
		t.StandbyMove = nil
	case mv != nil && p.othersCaughtUp(i, mv.From):
		p.dropStandby(i, mv.From, reasonBalance)
		t.StandbyMove = nil
	case mv == nil && !c.fixed:
		to, from := s.pair(i, unwanted)
		if to == nil || from == nil {
			return
		}
		now, then := s.span(i, nil, nil), s.span(i, from, to)
		if then <= now && !s.tasksAtRest || !build(to, then > now && now < start()) {
			return
		}
		reason := reasonBalance
		if then > now {
			reason = reasonZones
		}
		p.addStandby(i, to, reason)
		t.StandbyMove = &StandbyMove{From: from.id, To: to.id}
	}
}

// pair picks a copy the target wants for task i that is not a standby yet,
// and one of drops it would replace (nil if drops is empty): the pair whose
// copies span the most zones, then the first in the target and in drops.
func (s *standbyTarget) pair(i int, drops []*member) (add, drop *member) {
	best := -1
	for _, a := range s.task[i].copies {
		for j := 0; j < max(len(drops), 1) && !s.p.hasStandby(i, a.id); j++ {
			d := (*member)(nil)
			if j < len(drops) {
				d = drops[j]
			}
			if n := s.span(i, d, a); n > best {
				add, drop, best = a, d, n
			}
		}
	}
	return add, drop
}

// span counts the zones of task i's copies (its owner and standbys), with
// drop's copy dropped and add's added (each may be nil).
func (s *standbyTarget) span(i int, drop, add *member) int {
	return s.p.span(s.p.next[i].Active, s.p.next[i].Standbys, drop, add)
}

// span counts the zones of the live members among active, standbys and
// add (which may be nil), but skip.
func (p *planner) span(active string, standbys []string, skip, add *member) int {
	var buf [8]int
	zones := buf[:0]
	for j := -1; j <= len(standbys); j++ {
		m := add
		if j < 0 {
			m = p.byID[active]
		} else if j < len(standbys) {
			m = p.byID[standbys[j]]
		}
		if m != nil && m != skip && !slices.Contains(zones, m.zone) {
			zones = append(zones, m.zone)
		}
	}
	return len(zones)
}

// othersCaughtUp reports whether task i's standbys but except have caught up.
func (p *planner) othersCaughtUp(i int, except string) bool {
	return !slices.ContainsFunc(p.next[i].Standbys, func(s string) bool { return s != except && !p.caughtUp(i, s) })
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

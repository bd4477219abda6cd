package assign

import "slices"

// placeStandbys keeps Config.Standbys warm copies of each owned stateful
// task on eligible members other than its owner (detached or lost workers
// included): it computes the standby target once (see standbyTarget), then
// moves each task's standbys towards it by one rule, a new copy added
// before the one it replaces is dropped and nothing else dropped between,
// one move per task at a time (see towardsTarget).
func (p *planner) placeStandbys() {
	for _, t := range p.next {
		if mv := t.StandbyMove; mv != nil && (mv.From == mv.To || !slices.Contains(t.Standbys, mv.From) || !slices.Contains(t.Standbys, mv.To)) {
			t.StandbyMove = nil // one of its copies is gone, and the move with it
		}
	}
	if s := p.standbyTarget(); s != nil {
		build := p.buildSlots()
		for _, i := range s.tasks {
			s.towardsTarget(i, build)
		}
	}
}

// towardsTarget moves task i's standbys one step towards the target
// (build reserves room under the learner bounds, see buildSlots). No drop
// costs the task a zone that the copies left could span.
//   - Missing standbys are added at once, spanning the most zones first;
//     a moving task's only if this plan cost it a zone (so that its
//     destination stays put), the copy on its destination then counting
//     as missing, since it is to become the owner.
//   - If this plan cost the task a zone, surplus copies whose zone
//     another copy holds go at once, but one, to make room to win it back
//     (the spare copy of a move in flight too, ending the move, if a copy
//     the target wants wins a zone back).
//   - Surplus copies the target does not want are dropped, never the
//     planned owner's; a single one only once the others caught up and
//     the tasks are at rest (it may be where one goes).
//   - A move in flight ends once the copies kept have caught up, dropping
//     the copy the target wants gone first (sharing a zone before one
//     alone in its zone, then the replaced copy; the new one at once);
//     the promotion ends it if the replaced copy becomes the owner.
//   - Else, if the task stays put or this plan cost it a zone, a copy the
//     target wants replaces one it does not (the pair that spans the most
//     zones), waiting until the tasks are at rest unless it gains a zone
//     (the copies axis follows where tasks end), and for room under the
//     learner bounds unless it wins back a zone this plan cost the task.
func (s *standbyTarget) towardsTarget(i int, build func(m *member, anyway bool) bool) {
	p, t, c, mv := s.p, s.p.next[i], &s.task[i], s.moveOf(i)
	wanted := func(id string) bool { return slices.ContainsFunc(c.copies, func(m *member) bool { return m.id == id }) }
	span := func(drop, add *member) int { return p.span(t, drop, add) }
	start := func() int { return p.span(p.current[i], nil, nil) } // the zones it had
	// keeps: dropping m costs no zone the copies left could span.
	keeps := func(m *member) bool { return span(m, nil) >= min(span(nil, nil), len(t.Standbys)) }
	room := c.need + b2i(mv != nil)
	if c.holder != nil && c.holder != c.owner && p.hasStandby(i, c.holder.id) {
		room++ // the copy that is to become the owner
	}
	for add, _ := s.pair(i, nil); add != nil && len(t.Standbys) < room && (!c.fixed || span(nil, nil) < start()); add, _ = s.pair(i, nil) {
		p.addStandby(i, add, reasonStandbys) // counted if a move asks for room
	}
	if mv == nil && t.StandbyMove != nil && slices.ContainsFunc(p.moves, func(m Move) bool { return m.Task == p.tasks[i].ID }) {
		t.StandbyMove = nil // no copy to spare: both are plain standbys now
	}
	var buf, all [4]*member
	unwanted, standbys := buf[:0], all[:0]
	for _, id := range t.Standbys {
		if standbys = append(standbys, p.byID[id]); !wanted(id) && p.byID[id] != c.holder {
			unwanted = append(unwanted, p.byID[id])
		}
	}
	unwanted = s.dropOrder(i, unwanted, standbys)
	if now := span(nil, nil); now < start() {
		// This plan cost the task a zone: to win it back, surplus copies
		// whose zone another copy holds go at once, but one to replace;
		// so does the spare copy of a move in flight (ending the move) if
		// a copy the target wants wins a zone back.
		if add, _ := s.pair(i, nil); mv == nil || add != nil && span(nil, add) > now {
			for len(t.Standbys) > c.need && len(unwanted) > 1 && keeps(unwanted[0]) {
				p.dropStandby(i, unwanted[0].id, reasonTooMany)
				unwanted = unwanted[1:]
				t.StandbyMove, mv = nil, nil
			}
		}
	}
	switch extra := len(t.Standbys) - c.need; {
	case extra > b2i(mv != nil):
		if drop := unwanted[:min(extra, len(unwanted))]; len(drop) > 0 && (extra > 1 || s.tasksAtRest && p.othersCaughtUp(i, drop[0].id)) {
			for _, m := range drop {
				if keeps(m) || len(t.Standbys) > c.need+1 { // (one surplus copy may wait)
					p.dropStandby(i, m.id, reasonTooMany)
					t.StandbyMove = nil
				}
			}
		}
	case mv != nil && p.byID[mv.From] == c.holder:
		// The replaced copy is to become the owner: its promotion ends the move.
	case mv != nil && len(unwanted) > 0 && keeps(unwanted[0]) && (unwanted[0].id == mv.To || p.othersCaughtUp(i, unwanted[0].id)):
		// The replaced copy goes, or the one the target now wants gone
		// first (sharing a zone before one alone in its zone).
		reason := reasonBalance
		if unwanted[0].id == mv.To {
			reason = reasonNotNeeded
		}
		p.dropStandby(i, unwanted[0].id, reason)
		t.StandbyMove = nil
	case mv == nil:
		to, from := s.pair(i, unwanted)
		if to == nil || from == nil {
			return
		}
		now, then := span(nil, nil), span(from, to)
		if regain := then > now && now < start(); c.fixed && !regain || then <= now && !s.tasksAtRest || !build(to, regain) {
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
			if n := s.p.span(s.p.next[i], d, a); n > best {
				add, drop, best = a, d, n
			}
		}
	}
	return add, drop
}

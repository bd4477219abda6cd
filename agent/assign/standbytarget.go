package assign

import (
	"cmp"
	"slices"
)

// standbyTarget is the members each owned stateful task's standbys should
// be on, computed once per plan. It is the cheapest assignment of copies
// for a cost that ranks, in this order:
//
//  1. zones: each task's copies (its planned owner and its standbys) span
//     as many zones as members that may hold them allow, up to the copy
//     count; a task's zones are its own, so this holds for every task;
//  2. the copies axis: each eligible member's stateful copies (the tasks
//     planned to end on it plus its standbys) are within the floor and
//     ceiling of its capacity-weighted share of all copies, or as close as
//     the zones allow, a member further off its share costing more
//     (convex costs);
//  3. stickiness: a standby in place stays.
//
// It starts from the standbys in place (a copy being replaced not counted,
// the copy replacing it counted), fills what is missing, spreads each task
// over the zones it can reach, then moves copies along the shortest chains
// of members (see balanceCopies) while a chain lowers the cost of copies.
// Zones are never traded for the copies axis, and the copies axis never
// for stickiness.
type standbyTarget struct {
	p     *planner
	tasks []int // the owned stateful tasks
	// By task index: holder is the member the task is planned to end on
	// (its revoke target, else its destination, else its owner; nil if
	// none is eligible); need the standbys it can have; fixed
	// whether its standbys may only fill up (it is moving, or not yet on
	// its planned owner); copies its standbys in the target.
	holder []*member
	need   []int
	fixed  []bool
	copies [][]*member
	// By member index: actives counts the stateful tasks planned to end on
	// it, count its standbys in the target, floor and ceil bound its share
	// of all stateful copies.
	actives, count, floor, ceil []int
	// byZone lists the eligible members of each zone, by ID.
	byZone [][]*member
}

func (p *planner) standbyTarget() *standbyTarget {
	want := max(p.cfg.Standbys, 0)
	if want == 0 || len(p.eligible) == 0 {
		return nil
	}
	n, nm := len(p.tasks), len(p.members)
	s := &standbyTarget{p: p, holder: make([]*member, n), need: make([]int, n), fixed: make([]bool, n), copies: make([][]*member, n),
		actives: make([]int, nm), count: make([]int, nm), floor: make([]int, nm), ceil: make([]int, nm), byZone: make([][]*member, p.zones)}
	copies, slab := 0, 0
	for i, t := range p.next {
		if !p.tasks[i].Stateful || t.Active == "" || t.Revoke != nil && t.Revoke.Target == "" {
			continue // (a task being retired keeps no standbys)
		}
		s.tasks = append(s.tasks, i)
		h := p.task[i].dest
		if t.Revoke != nil {
			h = p.byID[t.Revoke.Target]
		} else if m := p.byID[t.Active]; h == nil && m != nil && m.eligible {
			h = m
		}
		others := len(p.eligible)
		if m := p.byID[t.Active]; m != nil && m.eligible {
			others--
		}
		s.holder[i], s.need[i] = h, min(want, others)
		s.fixed[i] = h == nil || h.id != t.Active || p.moving(i)
		if h != nil {
			s.actives[h.index]++
		}
		copies += 1 + s.need[i]
		slab += max(s.need[i], len(t.Standbys))
	}
	if len(s.tasks) == 0 {
		return nil
	}
	var sum uint64
	for _, m := range p.eligible {
		sum += m.weight
		s.byZone[m.zone] = append(s.byZone[m.zone], m)
	}
	for _, m := range p.eligible {
		sh := shareOf(copies, m.weight, sum)
		s.floor[m.index], s.ceil[m.index] = sh.floor, sh.floor+b2i(sh.frac > 0)
	}
	// Start from the standbys in place, then fill and spread each task.
	all := make([]*member, 0, slab)
	for _, i := range s.tasks {
		c := all[len(all):len(all)]
		for _, id := range p.next[i].Standbys {
			if m := p.byID[id]; !s.leavingCopy(i, id) && !(m == s.holder[i] && !s.fixed[i]) {
				c = append(c, m)
				s.count[m.index]++
			}
		}
		all = all[:len(all)+len(c)]
		s.copies[i] = c[:len(c):len(c)]
		for len(s.copies[i]) > s.need[i] {
			s.remove(i, s.dropOrder(i, s.copies[i])[0])
		}
	}
	for _, i := range s.tasks {
		s.fill(i)
		if !s.fixed[i] {
			s.spreadZones(i)
		}
	}
	s.balanceCopies()
	return s
}

// leavingCopy reports whether m's standby of task i is being replaced.
func (s *standbyTarget) leavingCopy(i int, m string) bool {
	mv := s.moveOf(i)
	return mv != nil && mv.From == m
}

// moveOf is task i's standby move in flight, nil if none or if the task
// has no copy to spare (one was lost meanwhile, or it may have more):
// then both copies are plain standbys.
func (s *standbyTarget) moveOf(i int) *StandbyMove {
	if t := s.p.next[i]; len(t.Standbys) > s.need[i] {
		return t.StandbyMove
	}
	return nil
}

// excluded reports whether m may not hold a standby of task i: it is not
// eligible, or it is the task's owner, planned owner, learner or revoke
// target.
func (s *standbyTarget) excluded(i int, m *member) bool {
	t := s.p.next[i]
	return !m.eligible || m.id == t.Active || m == s.holder[i] || s.p.learnerOn(i, m.id) || t.Revoke != nil && t.Revoke.Target == m.id
}

// candidate reports whether m may get a new standby of task i.
func (s *standbyTarget) candidate(i int, m *member) bool {
	return !s.excluded(i, m) && !slices.Contains(s.copies[i], m)
}

// inZone counts task i's copies in zone z: its planned owner and its
// standbys in the target.
func (s *standbyTarget) inZone(i, z int) int {
	n := 0
	if h := s.holder[i]; h != nil && h.zone == z {
		n++
	}
	for _, m := range s.copies[i] {
		if m.zone == z {
			n++
		}
	}
	return n
}

// cost is what a member's x-th stateful copy costs the copies axis: 0
// within its share's floor and ceiling, more the further off (convex).
func (s *standbyTarget) cost(m *member, x int) int {
	switch f, c := s.floor[m.index], s.ceil[m.index]; {
	case x <= f:
		return x - f - 1
	case x <= c:
		return 0
	default:
		return x - c
	}
}

// take is what one more standby on m costs; give what m's last one costs.
func (s *standbyTarget) take(m *member) int { return s.cost(m, s.actives[m.index]+s.count[m.index]+1) }
func (s *standbyTarget) give(m *member) int { return s.cost(m, s.actives[m.index]+s.count[m.index]) }

func (s *standbyTarget) add(i int, m *member) {
	s.copies[i] = append(s.copies[i], m)
	s.count[m.index]++
}

func (s *standbyTarget) remove(i int, m *member) {
	s.copies[i] = slices.DeleteFunc(s.copies[i], func(c *member) bool { return c == m })
	s.count[m.index]--
}

// dropOrder orders standbys ms of task i, the first to drop first: those
// whose zone another copy (its planned owner or one of ms) uses, then the
// highest lag, then the highest ID. A standby that is the task's planned
// owner (a move towards a standby) goes last.
func (s *standbyTarget) dropOrder(i int, ms []*member) []*member {
	key := func(m *member) [3]uint64 {
		alone := uint64(1)
		for _, c := range append([]*member{s.holder[i]}, ms...) {
			if c != nil && c != m && c.zone == m.zone {
				alone = 0
			}
		}
		return [3]uint64{uint64(b2i(m == s.holder[i])), alone, ^s.p.lag(i, m.id)}
	}
	out := slices.Clone(ms)
	slices.SortStableFunc(out, func(a, b *member) int {
		ka, kb := key(a), key(b)
		if c := slices.Compare(ka[:], kb[:]); c != 0 {
			return c
		}
		return cmp.Compare(b.id, a.id)
	})
	return out
}

// better reports whether a is a better new standby of task i than b: in a
// zone none of its copies (its owner and standbys) uses, then one that
// none of its future copies (planned owner, learners, revoke target) uses,
// then cheaper for the copies axis, then warm (the owner the task was just
// promoted away from, or a member with local state), then the lower ID.
func (s *standbyTarget) better(i int, a, b *member) bool {
	ka, kb := s.rank(i, a), s.rank(i, b)
	if c := slices.Compare(ka[:], kb[:]); c != 0 {
		return c < 0
	}
	return a.id < b.id
}

func (s *standbyTarget) rank(i int, m *member) [4]int {
	p, t := s.p, s.p.next[i]
	in := func(id string) bool { c := p.byID[id]; return c != nil && c.zone == m.zone }
	used := in(t.Active) || slices.ContainsFunc(s.copies[i], func(c *member) bool { return c.zone == m.zone })
	future := s.holder[i] != nil && s.holder[i].zone == m.zone || t.Revoke != nil && in(t.Revoke.Target)
	for _, l := range t.Learners {
		future = future || in(l.Member)
	}
	warm := m == p.task[i].demoted || p.position(i, m) > 0
	return [4]int{b2i(used), b2i(future), s.take(m), b2i(!warm)}
}

// best is the best candidate for a new standby of task i (see better)
// among the members of zones for which ok is true; nil if none.
func (s *standbyTarget) best(i int, ok func(zone int) bool) *member {
	var best *member
	for z, ms := range s.byZone {
		if !ok(z) {
			continue
		}
		for _, m := range ms {
			if s.candidate(i, m) && (best == nil || s.better(i, m, best)) {
				best = m
			}
		}
	}
	return best
}

// fill adds standbys to task i up to what it can have.
func (s *standbyTarget) fill(i int) {
	for len(s.copies[i]) < s.need[i] {
		m := s.best(i, func(int) bool { return true })
		if m == nil {
			return
		}
		s.add(i, m)
	}
}

// spreadZones moves task i's standbys that share a zone with another copy
// to zones no copy uses, while such a zone has a member that may hold one:
// the task's copies then span as many zones as they can.
func (s *standbyTarget) spreadZones(i int) {
	for {
		var from *member
		for _, m := range s.dropOrder(i, s.copies[i]) {
			if s.inZone(i, m.zone) > 1 {
				from = m
				break
			}
		}
		if from == nil {
			return
		}
		to := s.best(i, func(z int) bool { return s.inZone(i, z) == 0 })
		if to == nil {
			return
		}
		s.remove(i, from)
		s.add(i, to)
	}
}

// balanceCopies moves standbys of the tasks that are not fixed along
// chains of members while a chain lowers the cost of copies: a chain moves
// a copy from its first member to its second, another from the second to
// the third, and so on, so that only its ends change how many they hold,
// and no move changes how many zones its task spans. The first chains
// start on the members whose last copy costs the most; each is a shortest
// one, and copies placed in this plan travel before copies in place. When
// no chain is left, the copies axis is as balanced as the zones let it be.
func (s *standbyTarget) balanceCopies() {
	for {
		var levels []int
		low := 0
		for j, m := range s.p.eligible {
			if s.count[m.index] > 0 {
				levels = append(levels, s.give(m))
			}
			if t := s.take(m); j == 0 || t < low {
				low = t
			}
		}
		slices.Sort(levels)
		levels = slices.Compact(levels)
		moved := false
		for j := len(levels) - 1; j >= 0 && levels[j] > low && !moved; j-- {
			moved = s.chain(levels[j])
		}
		if !moved {
			return
		}
	}
}

// chain finds, breadth first, the shortest chain from a member whose last
// copy costs at least g to one whose next copy costs less, and applies it.
// It reports whether it did.
func (s *standbyTarget) chain(g int) bool {
	p := s.p
	type hop struct{ from, task int }
	via := make([]hop, len(p.members))
	// free[z] skips, in zone z's members, those already reached.
	free, at := make([][]int, len(s.byZone)), make([]int, len(p.members))
	for z, ms := range s.byZone {
		free[z] = make([]int, len(ms)+1)
		for j, m := range ms {
			free[z][j], at[m.index] = j, j
		}
		free[z][len(ms)] = len(ms)
	}
	next := func(z, j int) int {
		for free[z][j] != j {
			free[z][j] = free[z][free[z][j]]
			j = free[z][j]
		}
		return j
	}
	reach := func(m *member, h hop) {
		via[m.index] = h
		free[m.zone][at[m.index]] = at[m.index] + 1
	}
	var queue []*member
	for _, m := range p.eligible {
		if s.count[m.index] > 0 && s.give(m) >= g {
			queue = append(queue, m)
		}
	}
	slices.SortStableFunc(queue, func(a, b *member) int { return cmp.Compare(s.give(b), s.give(a)) })
	for _, m := range queue {
		reach(m, hop{-1, -1})
	}
	on := s.onMembers()
	var end *member
	for q, level := 0, len(queue); q < len(queue); q++ {
		a := queue[q]
		for _, i := range on[a.index] {
			for z, ms := range s.byZone {
				if len(ms) == 0 || !s.neutral(i, a, ms[0]) {
					continue // the move would change the task's zones
				}
				for j := next(z, 0); j < len(ms); j = next(z, j+1) {
					if b := ms[j]; s.candidate(i, b) {
						reach(b, hop{a.index, i})
						queue = append(queue, b)
						if t := s.take(b); t < g && (end == nil || t < s.take(end)) {
							end = b
						}
					}
				}
			}
		}
		if q+1 == level {
			if end != nil {
				break // the shortest chains end at this depth: take the cheapest end
			}
			level = len(queue)
		}
	}
	if end == nil {
		return false
	}
	return s.applyChain(end, func(m *member) (*member, int) {
		if h := via[m.index]; h.from >= 0 {
			return p.members[h.from], h.task
		}
		return nil, 0
	})
}

// applyChain moves the copies of the chain that ends on end, where back
// gives each member's predecessor and the task whose copy it gets (nil for
// the first). It undoes the moves and reports false if one of them, made
// after the others, would change its task's zones.
func (s *standbyTarget) applyChain(end *member, back func(*member) (*member, int)) bool {
	type step struct {
		task     int
		from, to *member
	}
	var steps []step
	for to := end; ; {
		from, i := back(to)
		if from == nil {
			break
		}
		steps = append(steps, step{i, from, to})
		to = from
	}
	for k := len(steps) - 1; k >= 0; k-- {
		st := steps[k]
		if s.candidate(st.task, st.to) && s.neutral(st.task, st.from, st.to) {
			s.remove(st.task, st.from)
			s.add(st.task, st.to)
			continue
		}
		for _, done := range steps[k+1:] {
			s.remove(done.task, done.to)
			s.add(done.task, done.from)
		}
		return false
	}
	return true
}

// neutral reports whether moving task i's copy from one member to another
// leaves the zones its copies span as they are.
func (s *standbyTarget) neutral(i int, from, to *member) bool {
	return from.zone == to.zone || (s.inZone(i, from.zone) > 1) == (s.inZone(i, to.zone) > 0)
}

// onMembers lists, by member index, the tasks whose target has a standby
// on the member and is not fixed: copies placed in this plan first, then
// by task.
func (s *standbyTarget) onMembers() [][]int {
	on := make([][]int, len(s.p.members))
	for _, placed := range []bool{true, false} {
		for _, i := range s.tasks {
			if s.fixed[i] {
				continue
			}
			for _, m := range s.copies[i] {
				if !s.p.hasStandby(i, m.id) == placed {
					on[m.index] = append(on[m.index], i)
				}
			}
		}
	}
	return on
}

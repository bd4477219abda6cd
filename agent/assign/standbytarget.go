package assign

import (
	"cmp"
	"math"
	"slices"
)

// standbyTarget is where each owned stateful task's standbys should be,
// computed once per plan: the cheapest placement for a cost that ranks
// first zones (a task's copies, owner and standbys, span as many zones as
// the members that may hold them allow, up to the copy count), then the
// copies axis (each member's stateful copies, the tasks planned to end on
// it plus its standbys, within its capacity-weighted share of all copies,
// a member further off costing more), then stickiness (a standby in place
// stays). It starts from the standbys in place (trimmed to the copy
// count by dropOrder: a move's replaced copy goes unless zones say
// otherwise), fills what is missing, spreads each task over the zones it can
// reach, then moves copies along chains of members (balanceCopies).
type standbyTarget struct {
	p      *planner
	tasks  []int       // the owned stateful tasks
	task   []copyPlan  // by task index
	member []copyLoad  // by member index
	byZone [][]*member // the eligible members of each zone
	// tasksAtRest: no stateful task is moving or just got a new owner
	// (the next plan may move it): where copies count is final.
	tasksAtRest bool
}

// copyPlan is one task's part of the target.
type copyPlan struct {
	// holder is the member the task is planned to end on (its revoke
	// target, else its destination, else its owner; nil if none is
	// eligible), owner its live owner. fixed: the task is moving or not on
	// its holder, so its standbys may only be added to.
	holder, owner *member
	fixed         bool
	need          int       // the standbys it can have
	copies        []*member // its standbys in the target
}

// copyLoad is one member's part: the stateful tasks planned to end on it,
// its standbys in the target, the bounds of its share of all copies.
type copyLoad struct{ actives, count, floor, ceil int }

func (p *planner) standbyTarget() *standbyTarget {
	want, copies := max(p.cfg.Standbys, 0), 0
	s := &standbyTarget{p: p, task: make([]copyPlan, len(p.tasks)), member: make([]copyLoad, len(p.members)), byZone: make([][]*member, p.zones), tasksAtRest: true}
	slab := make([]*member, 0, (want+1)*len(p.tasks))
	for i, t := range p.next {
		if want == 0 || !p.tasks[i].Stateful || t.Active == "" || t.Revoke != nil && t.Revoke.Target == "" {
			continue // (a task being retired keeps no standbys)
		}
		owner, c := p.byID[t.Active], &s.task[i]
		c.owner, c.holder, c.copies = owner, p.task[i].dest, slab[len(slab):len(slab):len(slab)+want+1]
		slab = slab[:len(slab)+want+1]
		if t.Revoke != nil {
			c.holder = p.byID[t.Revoke.Target]
		} else if c.holder == nil && owner != nil && owner.eligible {
			c.holder = owner
		}
		c.need = min(want, len(p.eligible)-b2i(owner != nil && owner.eligible))
		c.fixed = c.holder == nil || c.holder != owner || p.moving(i)
		s.tasksAtRest = s.tasksAtRest && !c.fixed && !p.task[i].newOwner
		if c.holder != nil {
			s.member[c.holder.index].actives++
		}
		s.tasks = append(s.tasks, i)
		copies += 1 + c.need
		for _, id := range t.Standbys {
			s.add(i, p.byID[id])
		}
		for len(c.copies) > c.need {
			s.remove(i, s.dropOrder(i, c.copies, c.copies)[0])
		}
	}
	if len(s.tasks) == 0 || len(p.eligible) == 0 {
		return nil
	}
	var sum uint64
	for _, m := range p.eligible {
		sum += m.weight
		s.byZone[m.zone] = append(s.byZone[m.zone], m)
	}
	for _, m := range p.eligible {
		sh := shareOf(copies, m.weight, sum)
		s.member[m.index].floor, s.member[m.index].ceil = sh.floor, sh.floor+b2i(sh.frac > 0)
	}
	// Fill each task, then move a standby that shares a zone with another
	// copy to a zone no copy uses while one has a member that may hold it
	// (a moving task's only if this plan cost it a zone). Each step adds a
	// copy or spans one more zone, so the loop ends.
	for _, i := range s.tasks {
		c := &s.task[i]
		lost := c.fixed && p.span(p.next[i], nil, nil) < p.span(p.current[i], nil, nil)
	loop:
		for {
			short := len(c.copies) < c.need
			var drop *member
			if !short {
				if c.fixed && !lost {
					break
				}
				drops := s.dropOrder(i, c.copies, c.copies)
				j := slices.IndexFunc(drops, func(m *member) bool { return m != c.holder && s.inZone(i, m.zone) > 1 })
				switch {
				case j >= 0:
					drop = drops[j]
				case lost && len(c.copies) == c.need && slices.Contains(c.copies, c.holder) && s.inZone(i, c.holder.zone) > 1:
					// The copy sharing a zone is the one on the destination,
					// which is to become the owner: one more goes beside it.
				default:
					break loop
				}
			}
			to := s.best(i, func(z int) bool { return short || s.inZone(i, z) == 0 })
			if to == nil {
				break
			}
			if drop != nil {
				s.remove(i, drop)
			}
			s.add(i, to)
		}
	}
	s.balanceCopies()
	return s
}

// moveOf is task i's standby move in flight; nil if none, or if the task
// has no copy to spare (one was lost, or it may have more).
func (s *standbyTarget) moveOf(i int) *StandbyMove {
	if t := s.p.next[i]; len(t.Standbys) > s.task[i].need {
		return t.StandbyMove
	}
	return nil
}

// candidate reports whether m may get a new standby of task i: eligible,
// not a standby in the target, owner, learner or revoke target (it may be
// the task's destination: a standby there serves as its learner).
func (s *standbyTarget) candidate(i int, m *member) bool {
	t := s.p.next[i]
	return m.eligible && m.id != t.Active && !s.p.learnerOn(i, m.id) && t.Revoke.target() != m.id && !slices.Contains(s.task[i].copies, m)
}

// inZone counts task i's copies in zone z: its owner, its standbys in the
// target.
func (s *standbyTarget) inZone(i, z int) int {
	n := 0
	if o := s.task[i].owner; o != nil && o.zone == z {
		n++
	}
	for _, m := range s.task[i].copies {
		n += b2i(m.zone == z)
	}
	return n
}

// take is what one more standby on m costs the copies axis, give what
// its last one costs: 0 within its share's floor and ceiling, more the
// further off (convex).
func (s *standbyTarget) take(m *member) int { return s.cost(m, 1) }
func (s *standbyTarget) give(m *member) int { return s.cost(m, 0) }
func (s *standbyTarget) cost(m *member, more int) int {
	l := s.member[m.index]
	x := l.actives + l.count + more
	return min(x-l.floor-1, 0) + max(x-l.ceil, 0)
}

func (s *standbyTarget) add(i int, m *member) {
	s.task[i].copies = append(s.task[i].copies, m)
	s.member[m.index].count++
}

func (s *standbyTarget) remove(i int, m *member) {
	s.task[i].copies = slices.DeleteFunc(s.task[i].copies, func(c *member) bool { return c == m })
	s.member[m.index].count--
}

// dropOrder orders ms, standbys of task i, the first to drop first: those
// whose zone another copy (its owner, its holder or one of among) uses,
// then the copy a move in flight replaces, then the highest lag, then the
// highest ID; its holder's copy (a move towards a standby) last.
func (s *standbyTarget) dropOrder(i int, ms, among []*member) []*member {
	if len(ms) < 2 {
		return ms
	}
	replaced := ""
	if mv := s.moveOf(i); mv != nil {
		replaced = mv.From
	}
	key := func(m *member) [4]uint64 {
		alone := true
		for _, c := range append([]*member{s.task[i].owner, s.task[i].holder}, among...) {
			alone = alone && (c == nil || c == m || c.zone != m.zone)
		}
		return [4]uint64{uint64(b2i(m == s.task[i].holder)), uint64(b2i(alone)), uint64(b2i(m.id != replaced)), ^s.p.lag(i, m.id)}
	}
	out := slices.Clone(ms)
	slices.SortStableFunc(out, func(a, b *member) int {
		ka, kb := key(a), key(b)
		return cmp.Or(slices.Compare(ka[:], kb[:]), cmp.Compare(b.id, a.id))
	})
	return out
}

// best is the best new standby of task i in a zone for which in is true,
// nil if none: in a zone none of its copies uses, then one none of its
// future copies (holder, revoke target, learners that may own it) uses, then the cheapest
// for the copies axis, then warm (the owner it was just promoted away
// from, or local state), then the lowest ID.
func (s *standbyTarget) best(i int, in func(zone int) bool) *member {
	p, t := s.p, s.p.next[i]
	future := []*member{s.task[i].holder, p.byID[t.Revoke.target()]}
	for _, l := range t.Learners {
		if m := p.byID[l.Member]; m != nil && m.attached {
			future = append(future, m)
		}
	}
	var best *member
	var bestRank [4]int
	for z, ms := range s.byZone {
		if !in(z) {
			continue
		}
		used := [2]int{b2i(s.inZone(i, z) > 0), b2i(slices.ContainsFunc(future, func(m *member) bool { return m != nil && m.zone == z }))}
		for _, m := range ms {
			warm := m == p.task[i].demoted || p.position(i, m) > 0
			if r := [4]int{used[0], used[1], s.take(m), b2i(!warm)}; s.candidate(i, m) && (best == nil || slices.Compare(r[:], bestRank[:]) < 0) {
				best, bestRank = m, r // zones by index, members by ID: ties keep the first
			}
		}
	}
	return best
}

// balanceCopies moves the standbys of tasks that are not fixed along
// chains of members while a chain lowers the cost of copies: a chain moves
// a copy from its first member to its second, another from the second to
// the third, and so on, so that only its ends change how many they hold;
// none of its moves changes how many zones its task spans. Chains start on
// the members whose last copy costs the most and are as short as can be.
// When none is left, the copies axis is as balanced as zones let it be.
func (s *standbyTarget) balanceCopies() {
	var on [][]int // the tasks whose copy on each member may move
	for moved := true; moved; {
		var gives []int
		low := math.MaxInt
		for _, m := range s.p.eligible {
			if s.member[m.index].count > 0 {
				gives = append(gives, s.give(m))
			}
			low = min(low, s.take(m))
		}
		slices.Sort(gives)
		moved = false
		for _, g := range slices.Backward(slices.Compact(gives)) {
			if g <= low {
				break
			}
			if on == nil {
				on = make([][]int, len(s.p.members))
				for _, i := range s.tasks {
					for _, m := range s.task[i].copies {
						if !s.task[i].fixed {
							on[m.index] = append(on[m.index], i)
						}
					}
				}
			}
			if moved = s.chain(g, low, on); moved {
				break
			}
		}
	}
}

// chain finds, breadth first, a shortest chain from a member whose last
// copy costs g or more to the member whose next copy costs least (less
// than g, low at best), carrying one copy of a task at most, and moves its
// copies (keeping on, see balanceCopies); it reports whether it did.
func (s *standbyTarget) chain(g, low int, on [][]int) bool {
	p := s.p
	type hop struct{ from, task int }
	via, queued := make([]hop, len(p.members)), make([]bool, len(p.members))
	var queue []*member
	for _, m := range p.eligible {
		if s.member[m.index].count > 0 && s.give(m) >= g {
			via[m.index], queued[m.index] = hop{-1, -1}, true
			queue = append(queue, m)
		}
	}
	slices.SortStableFunc(queue, func(a, b *member) int { return cmp.Compare(s.give(b), s.give(a)) })
	unreached := make([][]*member, len(s.byZone))
	for z, ms := range s.byZone {
		unreached[z] = slices.DeleteFunc(slices.Clone(ms), func(m *member) bool { return queued[m.index] })
	}
	carries := func(m *member, i int) bool {
		for ; via[m.index].from >= 0; m = p.members[via[m.index].from] {
			if via[m.index].task == i {
				return true
			}
		}
		return false
	}
	var end *member
	for q, depth := 0, len(queue); q < len(queue); q++ {
		a := queue[q]
		for _, i := range on[a.index] {
			if carries(a, i) {
				continue
			}
			for z, ms := range unreached {
				if len(ms) == 0 || z != a.zone && (s.inZone(i, a.zone) > 1) != (s.inZone(i, z) > 0) {
					continue // the move would change how many zones the task spans
				}
				left := ms[:0]
				for _, b := range ms {
					if !s.candidate(i, b) {
						left = append(left, b)
						continue
					}
					via[b.index] = hop{a.index, i}
					queue = append(queue, b)
					if t := s.take(b); t < g && (end == nil || t < s.take(end)) {
						end = b
					}
				}
				unreached[z] = left
			}
		}
		if end != nil && (s.take(end) == low || q+1 == depth) {
			break // the cheapest end of the shortest chains
		} else if q+1 == depth {
			depth = len(queue)
		}
	}
	for m := end; m != nil && via[m.index].from >= 0; m = p.members[via[m.index].from] {
		i, from := via[m.index].task, p.members[via[m.index].from]
		s.remove(i, from)
		s.add(i, m)
		on[from.index] = slices.DeleteFunc(on[from.index], func(j int) bool { return j == i })
		on[m.index] = append(on[m.index], i)
	}
	return end != nil
}

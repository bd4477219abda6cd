package assign

import "slices"

// shedThroughMiddle starts the first move of a chain of two, for a member
// above its standby quota none of whose standbys can move straight to a
// member with room (each member with room owns or holds every task it
// stands by for, or would cost a zone): one of its standbys moves, warm,
// to a middle member at its quota that does not hold that task and that
// can pass a standby of another task straight on to a member with room.
// While the copy is built both members are one above their quota; once it
// has caught up the copy on from is dropped (the one that cannot pass a
// copy on, see finishStandbyMove), and the middle member, now above its
// quota, passes a copy on as any member above its quota does. It reports
// whether it started a move.
//
// Only settled copies travel (see settledStandbys), and a copy never
// leaves a zone no other copy of its task uses for one that another copy
// uses. Middle members are tried in ID order, from's tasks from the
// highest ID down, so the same group always gets the same chain.
func (p *planner) shedThroughMiddle(from *member, settled map[*member][]int, zp *zonePicker, budget *buildBudget) bool {
	room := p.withRoom()
	for _, mid := range p.eligible {
		if mid == from || mid.standbys != mid.squota {
			continue
		}
		i, ok := p.passTask(from, mid, settled[from])
		if !ok || !p.canPassOn(mid, settled[mid], room) || !budget.take(mid) {
			continue
		}
		t := p.next[i]
		t.Standbys = append(t.Standbys, mid.id)
		slices.Sort(t.Standbys)
		zp.add(mid)
		p.move(i, MoveStandbyAdd, t.Active, mid.id, reasonBalance)
		return true
	}
	return false
}

// withRoom lists the eligible members below their standby quota.
func (p *planner) withRoom() []*member {
	var room []*member
	for _, m := range p.eligible {
		if m.standbys < m.squota {
			room = append(room, m)
		}
	}
	return room
}

// canPassOn reports whether m's settled standby of one of tasks can move
// straight to one of the members in room.
func (p *planner) canPassOn(m *member, tasks []int, room []*member) bool {
	for _, to := range room {
		if _, ok := p.passTask(m, to, tasks); ok {
			return true
		}
	}
	return false
}

// passTask picks the task whose settled copy on from can move to to: the
// highest ID that is not in a standby move and that to does not hold,
// without losing a zone.
func (p *planner) passTask(from, to *member, tasks []int) (int, bool) {
	for j := len(tasks) - 1; j >= 0; j-- {
		i := tasks[j]
		if len(p.next[i].Standbys) > p.need[i] || p.standbyExcluded(i)(to) {
			continue
		}
		used := p.zonesUsed(i, from.id)
		if slices.Contains(used, to.zone) && !slices.Contains(used, from.zone) {
			continue
		}
		return i, true
	}
	return 0, false
}

// settledStandbys lists, for each eligible member, the stateful tasks it
// stood by for before this plan whose standbys are settled: the task is
// not moving and has no standby move under way.
func (p *planner) settledStandbys(stateful []int) map[*member][]int {
	n := map[*member]int{}
	total := 0
	p.eachSettled(stateful, func(i int, m *member) { n[m]++; total++ })
	on := make(map[*member][]int, len(n))
	slab := make([]int, 0, total)
	for _, m := range p.eligible {
		if c := n[m]; c > 0 {
			on[m] = slab[len(slab) : len(slab) : len(slab)+c]
			slab = slab[:len(slab)+c]
		}
	}
	p.eachSettled(stateful, func(i int, m *member) { on[m] = append(on[m], i) })
	return on
}

// eachSettled calls f for each settled standby m of task i, in task order.
func (p *planner) eachSettled(stateful []int, f func(i int, m *member)) {
	for _, i := range stateful {
		if p.moving(i) || len(p.next[i].Standbys) > p.need[i] {
			continue
		}
		for _, s := range p.next[i].Standbys {
			if m := p.byID[s]; m.eligible && p.wasStandby(i, s) {
				f(i, m)
			}
		}
	}
}

// lastStandbyMove reports whether exactly one task has a standby move under
// way and no task is moving: the state in which the first move of a chain
// through a middle member ends.
func (p *planner) lastStandbyMove(stateful []int) bool {
	n := 0
	for _, i := range stateful {
		switch {
		case p.moving(i):
			return false
		case len(p.next[i].Standbys) > p.need[i]:
			n++
		}
	}
	return n == 1
}

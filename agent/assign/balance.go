package assign

import (
	"cmp"
	"math/bits"
	"slices"
)

// balance sets dest, the member each task should end on, so that every
// active-capable member (eligible, worker attached) ends with exactly its
// quotas (see setQuotas: stateful, stateless and all actives balanced at
// once), moving as few tasks as the quotas allow. For each kind:
//
//  1. a task being revoked goes to its revoke target (the move is under
//     way); a task promoted in this plan stays with its new owner (a task
//     is never activated and revoked in one generation); a task whose
//     owner's worker is detached stays there and counts for nobody's quota;
//  2. every member keeps its own tasks up to its room; an over-quota member
//     sheds first the tasks already moving (a learner elsewhere), then
//     those that an under-quota member has local state for (a restarted
//     member gets its tasks back), then the highest task IDs;
//  3. orphans (dead owner, lost worker, no owner) go to a warm member
//     with room left, else to a caught-up one at its quota, which then
//     sheds one more task (see pickOrphanOwner); the others join the shed;
//  4. the shed tasks and those of leaving members (leaving first, then by
//     task ID) go to their current learner if it has room; the others then
//     to a member with room that holds them warm (standby with the lowest
//     lag, then the furthest local copy); the rest to the member with the
//     most room.
//
// Each step only fills room, and the quotas add up to the tasks balanced,
// so every task gets a destination. Nothing moves when every member holds
// its quota, and a member that joins or leaves moves only the tasks that the
// change of quotas requires.
func (p *planner) balance() {
	p.countOwned()
	// Whether each task is an orphan or pinned does not change while
	// balance runs: settle it once.
	p.isOrphan = make([]bool, len(p.tasks))
	p.isPinned = make([]bool, len(p.tasks))
	for i, t := range p.next {
		m := p.byID[t.Active]
		p.isOrphan[i] = t.Active == "" || m == nil || m.lost
		p.isPinned[i] = !p.isOrphan[i] && m.eligible && !m.attached && t.Revoke == nil
	}
	setQuotas(p.actives, p.balanced())
	for _, k := range []kind{statefulKind, statelessKind} {
		p.balanceKind(k)
	}
}

// balanceKind sets dest for the tasks of kind k (see balance).
func (p *planner) balanceKind(k kind) {
	for _, m := range p.actives {
		m.room[k] = m.quota[k]
	}

	// Step 1, and the tasks of each active-capable owner grouped by owner.
	var shed, orphans []int
	owned := make([]int, len(p.actives)+1)
	for i := range p.tasks {
		if kindOf(p.tasks[i].Stateful) != k {
			continue
		}
		t := p.next[i]
		owner := p.byID[t.Active]
		switch {
		case p.isOrphan[i]:
			orphans = append(orphans, i)
		case t.Revoke != nil:
			m := p.byID[t.Revoke.Target]
			p.dest[i] = m
			m.room[k]--
		case p.fixed[i]:
			p.dest[i] = owner
			owner.room[k]--
		case p.isPinned[i]:
			p.dest[i] = owner
		case !owner.attached:
			shed = append(shed, i)
		default:
			owned[owner.aidx+1]++
		}
	}
	for j := 1; j < len(owned); j++ {
		owned[j] += owned[j-1]
	}
	byOwner := make([]int, owned[len(owned)-1])
	fill := slices.Clone(owned[:len(owned)-1])
	for i := range p.tasks {
		t := p.next[i]
		if kindOf(p.tasks[i].Stateful) != k || t.Revoke != nil || p.fixed[i] || p.isOrphan[i] {
			continue
		}
		if owner := p.byID[t.Active]; owner != nil && owner.attached {
			byOwner[fill[owner.aidx]] = i
			fill[owner.aidx]++
		}
	}

	// under: what each member will hold of kind k before any move starts
	// (revoke targets, tasks it got in this plan, tasks it owns and is
	// not being revoked from) is below its quota.
	for _, m := range p.actives {
		m.under = m.quota[k]-m.room[k]+owned[m.aidx+1]-owned[m.aidx] < m.quota[k]
	}
	p.markMoving(k)

	// Step 2. kept[j] are the tasks member j keeps, those it would shed
	// next last.
	kept := make([][]int, len(p.actives))
	for _, m := range p.actives {
		mine := byOwner[owned[m.aidx]:owned[m.aidx+1]]
		keep := max(m.room[k], 0)
		if len(mine) > keep {
			p.sortForShedding(mine, m, k)
			shed = append(shed, mine[keep:]...)
			mine = mine[:keep]
		}
		for _, i := range mine {
			p.dest[i] = m
		}
		kept[m.aidx] = mine
		m.room[k] -= len(mine)
	}

	// Step 3.
	cold := p.placeOrphansWarm(orphans, k, func(m *member) {
		j := len(kept[m.aidx]) - 1
		if j < 0 {
			return
		}
		shed = append(shed, kept[m.aidx][j])
		kept[m.aidx] = kept[m.aidx][:j]
		m.room[k]++
	})

	// Step 4.
	slices.SortFunc(shed, func(a, b int) int {
		la, lb := p.byID[p.next[a].Active].leaving, p.byID[p.next[b].Active].leaving
		if la != lb {
			return boolFirst(la)
		}
		return cmp.Compare(a, b)
	})
	shed = append(cold, shed...)
	// Learners claim their room before warm copies and empty room are
	// handed out, so that a move in flight keeps its destination.
	var rest []int
	for _, i := range shed {
		if m := p.learnerDestination(i, k); m != nil {
			p.dest[i] = m
			m.room[k]--
			continue
		}
		rest = append(rest, i)
	}
	shed, rest = rest, nil
	for _, i := range shed {
		if m := p.warmDestination(i, k); m != nil {
			p.dest[i] = m
			m.room[k]--
			continue
		}
		rest = append(rest, i)
	}
	if len(rest) == 0 {
		return
	}
	rooms := newRoomHeap(k, p.actives)
	for _, i := range rest {
		m := rooms.top()
		p.dest[i] = m
		rooms.take(m)
	}
}

// sortForShedding orders m's tasks so that those it should keep come first:
// tasks already moving (see markMoving) are shed first,
// then tasks whose copy on an under-quota member is freshest are shed first (a
// restarted member gets back the tasks it left, not stale copies of tasks
// it held long ago), then the highest task IDs. The order depends only on
// what a plan does not change (owners, quotas, reported positions, by order
// of magnitude), so consecutive plans shed the same tasks and a change of
// quota sheds or keeps tasks at the margin.
func (p *planner) sortForShedding(tasks []int, m *member, k kind) {
	type ranked struct {
		task   int
		moving bool   // its move is under way (markMoving)
		gap    uint64 // how far the freshest copy on an under-quota member trails m's
	}
	rs := make([]ranked, len(tasks))
	for j, i := range tasks {
		rs[j] = ranked{i, p.movingOut[i], ^uint64(0)}
		if k == statefulKind {
			rs[j].gap = p.warmGap(i, m, k)
		}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		// A move in flight keeps going: it is shed last of all kept.
		if a.moving != b.moving {
			return boolFirst(b.moving)
		}
		// Keep first the tasks whose copies elsewhere are stalest. Gaps
		// compare by order of magnitude, so that tasks committing at
		// slightly different rates don't swap places from plan to plan.
		if c := cmp.Compare(bits.Len64(b.gap), bits.Len64(a.gap)); c != 0 {
			return c
		}
		return cmp.Compare(a.task, b.task)
	})
	for j, r := range rs {
		tasks[j] = r.task
	}
}

// warmGap is how many changelog sequences the freshest copy of task i on an
// active-capable under-quota member other than owner trails the owner's copy:
// the smaller, the less a move there replays. Max uint64 if none has one.
func (p *planner) warmGap(i int, owner *member, k kind) uint64 {
	best := ^uint64(0)
	own := p.position(i, owner)
	for _, e := range p.pos.of(i) {
		if e.m != owner && e.m.attached && e.m.owned[k] < e.m.quota[k] {
			gap := uint64(0)
			if own > e.pos {
				gap = own - e.pos
			}
			best = min(best, gap)
		}
	}
	return best
}

// markMoving sets movingOut for the tasks of kind k whose move is under
// way: each has a learner on another active-capable member that holds
// fewer tasks of the kind than its quota (member.under). It depends only on owners, quotas and
// learners of tasks that were shed anyway, so consecutive plans mark the
// same tasks while nothing completes.
func (p *planner) markMoving(k kind) {
	if p.movingOut == nil {
		p.movingOut = make([]bool, len(p.tasks))
	}
	for i := range p.tasks {
		t := p.next[i]
		if kindOf(p.tasks[i].Stateful) != k || t.Revoke != nil || p.fixed[i] {
			continue
		}
		for _, l := range t.Learners {
			if m := p.byID[l.Member]; m != nil && m.attached && m.id != t.Active && m.under {
				p.movingOut[i] = true
				break
			}
		}
	}
}

// learnerDestination is shed task i's learner if it has room, else nil.
func (p *planner) learnerDestination(i int, k kind) *member {
	t := p.next[i]
	for _, l := range t.Learners {
		if m := p.byID[l.Member]; m != nil && m.attached && m.id != t.Active && m.room[k] > 0 {
			return m
		}
	}
	return nil
}

// warmDestination picks where shed task i should go if a member with room
// holds it warm: a standby (lowest lag, then ID), else the member with the
// furthest local copy. Nil if none.
func (p *planner) warmDestination(i int, k kind) *member {
	t := p.next[i]
	ok := func(m *member) bool { return m != nil && m.attached && m.id != t.Active && m.room[k] > 0 }
	if k == statelessKind {
		return nil
	}
	var best *member
	var bestLag uint64
	for _, s := range t.Standbys {
		m := p.byID[s]
		if !ok(m) {
			continue
		}
		if l := p.lag(i, s); best == nil || l < bestLag {
			best, bestLag = m, l // standbys are sorted, so ties keep the lower ID
		}
	}
	if best != nil {
		return best
	}
	for _, e := range p.pos.of(i) {
		if ok(e.m) {
			return e.m
		}
	}
	return nil
}

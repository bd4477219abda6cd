package assign

import (
	"cmp"
	"math/bits"
	"slices"
)

// balancer is one balance of the actives: where each task should end when
// the members in capable may own tasks. It reads the planner and writes
// only its own fields, so a plan may balance twice (see setDestinations).
type balancer struct {
	p       *planner
	capable []*member
	// slot is each member's index in capable and load, by member index;
	// -1 for a member that is not capable.
	slot []int
	load []memberLoad
	// held fixes the destination of some tasks in advance (nil: none).
	held []*member
	// orphan marks the tasks nobody serves (no owner, a dead owner, or one
	// whose worker is lost), pinned those that stay with an owner that is
	// not capable but eligible (its worker is detached: it keeps the
	// actives it has, and they count for nobody's quota) and are not
	// being revoked.
	orphan, pinned []bool
	// movingOut marks the tasks whose move to a learner is under way and
	// can finish (see markMoving).
	movingOut []bool
	// owner is each task's live owner (nil if none), dest its destination.
	owner, dest []*member
}

// memberLoad is one capable member's counts while balance runs, by kind.
type memberLoad struct {
	// owned: the tasks it owns; quota: what it should end with; room:
	// what balance may still give it.
	owned, quota, room [2]int
	// heapAt is its position in the room heap of each kind.
	heapAt [2]int
	// short is how many tasks of the kind being placed it lacks before
	// any move starts (see markMoving).
	short int
}

// balance returns the member each task should end on (nil if none) when
// the members in capable may own tasks, with held's destinations fixed
// (nil: none) and revoking[i] the target of a revoke this plan starts for
// stateless task i (nil: none; see counted), so that every capable member
// ends with exactly its quotas (see setQuotas: stateful, stateless and all
// actives balanced at once), moving as few tasks as the quotas allow. For
// each kind:
//
//  1. a task being revoked goes to its revoke target (the move is under
//     way); a task that got a new owner in this plan stays with it (a task
//     is never activated and revoked in one generation); a pinned task
//     stays with its owner;
//  2. every member keeps its own tasks up to its room; an over-quota member
//     sheds first the tasks already moving (a learner elsewhere), then
//     those that an under-quota member has local state for (a restarted
//     member gets its tasks back), then the highest task IDs;
//  3. orphans go to a warm member with room left, else to a caught-up one
//     at its quota, which then sheds one more task (see pickOrphanOwner);
//     the others join the shed;
//  4. the shed tasks and those of leaving members (leaving first, then by
//     task ID) go to their current learner if it has room; the others then
//     to a member with room that holds them warm (standby with the lowest
//     lag, then the furthest local copy), a caught-up standby before
//     the others, the tasks with the fewest warm members first (see
//     placeWarm); the rest to the member with the most room.
//
// Each step only fills room, and the quotas add up to the tasks balanced,
// so every task gets a destination. Nothing moves when every member holds
// its quota, and a member that joins or leaves moves only the tasks that the
// change of quotas requires.
func (p *planner) balance(capable []*member, held []*member, revoking []*member) []*member {
	n := len(p.tasks)
	b := &balancer{p: p, capable: capable, slot: make([]int, len(p.members)), load: make([]memberLoad, len(capable)), held: held,
		orphan: make([]bool, n), pinned: make([]bool, n), movingOut: make([]bool, n), owner: make([]*member, n), dest: make([]*member, n)}
	for i := range b.slot {
		b.slot[i] = -1
	}
	for j, m := range capable {
		b.slot[m.index] = j
	}
	var total [2]int
	for i, t := range p.next {
		m := p.byID[t.Active]
		b.owner[i] = m
		k := kindOf(p.tasks[i].Stateful)
		b.orphan[i] = m == nil || m.lost
		b.pinned[i] = !b.orphan[i] && m.eligible && !b.can(m) && t.Revoke == nil
		if !b.pinned[i] {
			total[k]++
		}
		if l := b.loadOf(b.counted(i, m, revoking)); l != nil {
			l.owned[k]++
		}
	}
	setQuotas(capable, b.load, total)
	for _, k := range []kind{statefulKind, statelessKind} {
		b.balanceKind(k)
	}
	return b.dest
}

// counted is the member task i counts for in the quotas (memberLoad.owned),
// where m owns it: a stateless task being revoked counts for its revoke
// target, where step 1 sends it, and so does one that this plan revokes
// (revoking; see setDestinations). Counted for its owner until its new
// owner took it over, a stateless move's end changed the counts the quotas
// keep tasks by, and the next plan could send another task back the other
// way: members traded stateless tasks generation after generation while
// the stateful moves they made room for were begun and dropped in turn. A
// stateful task counts for its owner: its revoke comes once a learner has
// caught up, in a later plan, and counting it at the target would make that
// plan's own revokes change the next one's quotas (in cold mode, where it
// moves as a stateless one does, it counts as one).
func (b *balancer) counted(i int, m *member, revoking []*member) *member {
	if b.p.tasks[i].Stateful && b.p.cfg.Handover != Cold {
		return m
	}
	if rv := b.p.next[i].Revoke; rv != nil {
		return b.p.byID[rv.Target]
	}
	if revoking != nil && revoking[i] != nil {
		return revoking[i]
	}
	return m
}

// can reports whether m may own tasks in this balance.
func (b *balancer) can(m *member) bool { return m != nil && b.slot[m.index] >= 0 }

// loadOf is m's load, or nil if m is not capable.
func (b *balancer) loadOf(m *member) *memberLoad {
	if !b.can(m) {
		return nil
	}
	return &b.load[b.slot[m.index]]
}

// room is what balance may still give m of kind k; 0 if m is not capable.
func (b *balancer) room(m *member, k kind) int {
	if l := b.loadOf(m); l != nil {
		return l.room[k]
	}
	return 0
}

// give sends task i to m, which takes one of its room of kind k.
func (b *balancer) give(i int, m *member, k kind) {
	b.dest[i] = m
	if l := b.loadOf(m); l != nil {
		l.room[k]--
	}
}

// keeps reports whether task i is one its capable owner keeps unless it
// is above its quota (step 2 of balance).
func (b *balancer) keeps(i int) bool {
	t := b.p.next[i]
	return !(b.held != nil && b.held[i] != nil) && !b.orphan[i] && t.Revoke == nil && !b.p.task[i].newOwner && !b.pinned[i] && b.can(b.owner[i])
}

// balanceKind sets dest for the tasks of kind k (see balance).
func (b *balancer) balanceKind(k kind) {
	p := b.p
	for j := range b.load {
		b.load[j].room[k] = b.load[j].quota[k]
	}

	// Step 1, and the tasks each capable owner keeps for step 2, by slot
	// (counted, then placed in one slab).
	var shed, orphans []int
	mine, owned := make([][]int, len(b.capable)), make([]int, len(b.capable))
	for i := range p.tasks {
		if kindOf(p.tasks[i].Stateful) == k && b.keeps(i) {
			owned[b.slot[b.owner[i].index]]++
		}
	}
	flat := make([]int, len(p.tasks))
	for j, n := range owned {
		mine[j], flat = flat[:0:n], flat[n:]
	}
	for i := range p.tasks {
		if kindOf(p.tasks[i].Stateful) != k {
			continue
		}
		t, owner := p.next[i], b.owner[i]
		switch {
		case b.held != nil && b.held[i] != nil:
			b.give(i, b.held[i], k)
		case b.orphan[i]:
			orphans = append(orphans, i)
		case t.Revoke != nil:
			b.give(i, p.byID[t.Revoke.Target], k)
		case p.task[i].newOwner:
			b.give(i, owner, k)
		case b.pinned[i]:
			b.dest[i] = owner
		case !b.can(owner):
			shed = append(shed, i)
		default:
			s := b.slot[owner.index]
			mine[s] = append(mine[s], i)
		}
	}
	for j := range b.load {
		b.load[j].short = max(b.load[j].room[k]-len(mine[j]), 0)
	}
	b.markMoving(k)

	// Step 2: kept[j] are the tasks capable[j] keeps, those it would shed
	// next last.
	kept := make([][]int, len(b.capable))
	for j, m := range b.capable {
		own := mine[j]
		keep := max(b.load[j].room[k], 0)
		if len(own) > keep {
			b.sortForShedding(own, m, k)
			shed = append(shed, own[keep:]...)
			own = own[:keep]
		}
		for _, i := range own {
			b.dest[i] = m
		}
		kept[j] = own
		b.load[j].room[k] -= len(own)
	}

	// Step 3.
	cold := b.placeOrphansWarm(orphans, k, func(m *member) {
		s := b.slot[m.index]
		j := len(kept[s]) - 1
		if j < 0 {
			return
		}
		shed = append(shed, kept[s][j])
		kept[s] = kept[s][:j]
		b.load[s].room[k]++
	})

	// Step 4.
	slices.SortFunc(shed, func(a, c int) int {
		la, lc := b.owner[a].leaving, b.owner[c].leaving
		if la != lc {
			return boolFirst(la)
		}
		return cmp.Compare(a, c)
	})
	shed = b.placeWarm(append(cold, shed...), k)
	if len(shed) == 0 {
		return
	}
	rooms := newRoomHeap(k, b)
	for _, i := range shed {
		m := rooms.top()
		b.dest[i] = m
		rooms.take(m)
	}
}

// sortForShedding orders m's tasks so that those it should keep come first:
// tasks already moving (see markMoving) are shed first, then tasks whose
// copy on an under-quota member is freshest (a restarted member gets back
// the tasks it left, not stale copies of tasks it held long ago), then the
// highest task IDs. The order depends only on what a plan does not change
// (owners, quotas, reported positions, by order of magnitude), so
// consecutive plans shed the same tasks and a change of quota sheds or
// keeps tasks at the margin.
func (b *balancer) sortForShedding(tasks []int, m *member, k kind) {
	type ranked struct {
		task   int
		moving bool   // its move is under way (markMoving)
		gap    uint64 // how far the freshest copy on an under-quota member trails m's
	}
	rs := make([]ranked, len(tasks))
	for j, i := range tasks {
		rs[j] = ranked{i, b.movingOut[i], ^uint64(0)}
		if k == statefulKind {
			rs[j].gap = b.warmGap(i, m, k)
		}
	}
	slices.SortFunc(rs, func(a, c ranked) int {
		// A move in flight keeps going: it is shed last of all kept.
		if a.moving != c.moving {
			return boolFirst(c.moving)
		}
		// Keep first the tasks whose copies elsewhere are stalest. Gaps
		// compare by order of magnitude, so that tasks committing at
		// slightly different rates don't swap places from plan to plan.
		if d := cmp.Compare(bits.Len64(c.gap), bits.Len64(a.gap)); d != 0 {
			return d
		}
		return cmp.Compare(a.task, c.task)
	})
	for j, r := range rs {
		tasks[j] = r.task
	}
}

// warmGap is how many changelog sequences the freshest copy of task i on a
// capable under-quota member other than owner trails the owner's copy: the
// smaller, the less a move there replays. Max uint64 if none has one.
func (b *balancer) warmGap(i int, owner *member, k kind) uint64 {
	best := ^uint64(0)
	own := b.p.position(i, owner)
	for _, e := range b.p.positions.of(i) {
		if l := b.loadOf(e.m); e.m != owner && l != nil && l.owned[k] < l.quota[k] {
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
// way: each has a learner on another capable member that lacks tasks of
// the kind (memberLoad.short), as many as it lacks, in task order. It
// depends only on owners, quotas and learners, so consecutive plans mark
// the same tasks while nothing completes, and a learner that the member
// has no room for is not marked in one plan and dropped in the next.
func (b *balancer) markMoving(k kind) {
	p := b.p
	for i := range p.tasks {
		t := p.next[i]
		if kindOf(p.tasks[i].Stateful) != k || t.Revoke != nil || p.task[i].newOwner {
			continue
		}
		for _, ln := range t.Learners {
			if l := b.loadOf(p.byID[ln.Member]); l != nil && ln.Member != t.Active && l.short > 0 {
				l.short--
				b.movingOut[i] = true
				break
			}
		}
	}
}

// placeWarm gives the shed tasks of kind k their learner if it has room,
// else a member with room that holds them warm (warmDestination), and
// returns the others in shed's order. Learners claim their room first, so
// that a move in flight keeps its destination; then the standbys that have
// caught up (they can take over at once); then the other warm members.
// These two serve the tasks with the fewest warm members first, then in
// shed's order. In shed's order alone, a task warm on two members could
// take the last room of the only one another task is warm on, sending
// that one cold to a member that needs a learner; and as a plan adds
// standbys (a copy beside the one on a task's destination, say), the next
// plan, finding one more warm member for the first task, took that room
// and started a learner the plan before had not. The order does not depend
// on room, which the tasks this plan revokes or gives a learner take first
// in the next one (step 1, learners), so that the tasks left choose as
// they did.
func (b *balancer) placeWarm(shed []int, k kind) []int {
	type ranked struct{ task, at, warm int }
	rs := make([]ranked, len(shed))
	for j, i := range shed {
		rs[j] = ranked{task: i, at: j}
		if k == statefulKind {
			rs[j].warm = b.warmMembers(i)
		}
	}
	place := func(pick func(int, kind) *member) {
		left := rs[:0]
		for _, r := range rs {
			if m := pick(r.task, k); m != nil {
				b.give(r.task, m, k)
				continue
			}
			left = append(left, r)
		}
		rs = left
	}
	place(b.learnerDestination)
	slices.SortStableFunc(rs, func(a, c ranked) int { return cmp.Compare(a.warm, c.warm) })
	if k == statefulKind {
		place(func(i int, k kind) *member { return b.warmDestination(i, k, true) })
		place(func(i int, k kind) *member { return b.warmDestination(i, k, false) })
	}
	slices.SortFunc(rs, func(a, c ranked) int { return cmp.Compare(a.at, c.at) })
	out := shed[:0]
	for _, r := range rs {
		out = append(out, r.task)
	}
	return out
}

// warmMembers counts the capable members other than its owner that hold
// task i warm: its standbys and the members with local state.
func (b *balancer) warmMembers(i int) int {
	p := b.p
	t := p.next[i]
	n := 0
	for _, s := range t.Standbys {
		if m := p.byID[s]; b.can(m) && m.id != t.Active {
			n++
		}
	}
	for _, e := range p.positions.of(i) {
		if b.can(e.m) && e.m.id != t.Active && !p.hasStandby(i, e.m.id) {
			n++
		}
	}
	return n
}

// learnerDestination is shed task i's learner if it has room, else nil.
func (b *balancer) learnerDestination(i int, k kind) *member {
	t := b.p.next[i]
	for _, l := range t.Learners {
		if m := b.p.byID[l.Member]; m != nil && m.id != t.Active && b.room(m, k) > 0 {
			return m
		}
	}
	return nil
}

// warmDestination picks where shed task i should go if a member with room
// holds it warm: a standby (lowest lag, then furthest local copy, then
// ID), else the member with the furthest local copy; with caughtUp, only a
// standby that has caught up. Nil if none.
func (b *balancer) warmDestination(i int, k kind, caughtUp bool) *member {
	p := b.p
	t := p.next[i]
	ok := func(m *member) bool { return m != nil && m.id != t.Active && b.room(m, k) > 0 }
	if k == statelessKind {
		return nil
	}
	var best *member
	var bestLag uint64
	for _, s := range t.Standbys {
		m := p.byID[s]
		if !ok(m) || caughtUp && !p.caughtUp(i, s) {
			continue
		}
		// Standbys are sorted, so ties keep the lower ID; a tie of lags
		// (none reported, say) goes to the furthest local copy, so that a
		// copy just placed does not take over from one in place.
		if l := p.lag(i, s); best == nil || l < bestLag || l == bestLag && p.position(i, m) > p.position(i, best) {
			best, bestLag = m, l
		}
	}
	if best != nil || caughtUp {
		return best
	}
	for _, e := range p.positions.of(i) {
		if ok(e.m) {
			return e.m
		}
	}
	return nil
}

package assign

import (
	"cmp"
	"slices"
)

// placeOrphansWarm chooses, within balanceKind, the destination of the
// orphans of kind k that a warm member can take (see pickOrphanOwner).
// When it picks a member at its quota, evict makes that member shed one
// more task. It returns the orphans left for the general placement.
//
// Orphans with the fewest warm members that have room choose first, so
// that one taking the last room of a member does not push another onto an
// over-quota member (and balance then moving a task again).
func (b *balancer) placeOrphansWarm(orphans []int, k kind, evict func(*member)) (cold []int) {
	if len(orphans) == 0 {
		return nil
	}
	cands := make(map[int][]*member, len(orphans))
	rank := make(map[int]int, len(orphans))
	for _, i := range orphans {
		cands[i] = b.warmCandidates(i)
		rank[i] = len(b.capable) + 1
		if n := b.withRoom(cands[i], k); n > 0 {
			rank[i] = n
		}
	}
	slices.SortStableFunc(orphans, func(a, c int) int { return cmp.Compare(rank[a], rank[c]) })
	for _, i := range orphans {
		m := b.pickOrphanOwner(i, cands[i])
		if m == nil {
			cold = append(cold, i)
			continue
		}
		b.give(i, m, k)
		if b.room(m, k) < 0 {
			evict(m)
		}
	}
	return cold
}

// placeOrphans gives each task that nobody serves the owner balance chose
// for it, at once: the tasks of dead members (failover), of members whose
// worker is lost (their agent released them on the worker's behalf), and
// unowned ones (a new group or task, or one unassigned while no member
// could own it). No learner is waited for. The new owner gets epoch+1; a
// lost worker's task carries the hand-off sequence and time of its agent's
// release, a dead member's has none (the new owner's epoch fences the old
// one). Balance keeps these tasks where they land in this plan.
func (p *planner) placeOrphans() {
	for i := range p.tasks {
		m := p.task[i].dest
		if m == nil || !p.orphan(i) {
			continue
		}
		t := p.next[i]
		old := p.byID[t.Active]
		switch {
		case t.Active == "":
			p.move(i, MoveAssign, "", m.id, reasonUnowned)
		case old != nil && old.lost:
			p.move(i, MoveFailover, t.Active, m.id, reasonWorkerLost)
		default:
			p.move(i, MoveFailover, t.Active, m.id, reasonOwnerDead)
		}
		t.HandoffSeq, t.HandoffAt = 0, zeroTime
		if old != nil {
			if r, ok := old.rec.Released[p.tasks[i].ID]; ok && r.Epoch == t.Epoch {
				t.HandoffSeq, t.HandoffAt = r.Seq, r.At
			}
			p.task[i].demoted = old
		}
		p.removeMember(i, m.id)
		t.Epoch = p.mintEpoch(i)
		t.Active = m.id
		t.Revoke = nil
		p.task[i].newOwner = true
	}
}

// warmCandidates lists the capable members that can serve orphan task i
// soonest, best first: its standbys, then its learners (each by
// lowest lag, then ID), then the members with local state (furthest
// first). For a stateless task it is the target of an interrupted revoke.
func (b *balancer) warmCandidates(i int) []*member {
	p := b.p
	t := p.next[i]
	var out []*member
	add := func(m *member) {
		if b.can(m) && m.id != t.Active && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	if !p.tasks[i].Stateful {
		if t.Revoke != nil {
			add(p.byID[t.Revoke.Target])
		}
		return out
	}
	byLag := func(ids []string) {
		ms := make([]*member, 0, len(ids))
		for _, id := range ids {
			if m := p.byID[id]; b.can(m) {
				ms = append(ms, m)
			}
		}
		slices.SortFunc(ms, func(a, b *member) int {
			if c := cmp.Compare(p.lag(i, a.id), p.lag(i, b.id)); c != 0 {
				return c
			}
			return cmp.Compare(a.id, b.id)
		})
		for _, m := range ms {
			add(m)
		}
	}
	byLag(t.Standbys)
	ids := make([]string, 0, len(t.Learners))
	for _, l := range t.Learners {
		ids = append(ids, l.Member)
	}
	byLag(ids)
	for _, e := range p.positions.of(i) {
		add(e.m)
	}
	return out
}

// withRoom counts the members of ms with room for a task of kind k.
func (b *balancer) withRoom(ms []*member, k kind) int {
	n := 0
	for _, m := range ms {
		if b.room(m, k) > 0 {
			n++
		}
	}
	return n
}

// pickOrphanOwner chooses where orphan task i goes, weighing warmth
// against the load it leaves:
//
//  1. the best warm candidate (standby, learner, local copy, in that
//     order) whose member has room under its quota; among the caught-up
//     ones (lag within the acceptable lag), the one with the most room;
//  2. else the best caught-up candidate even if it is at its quota: the
//     task serves at once, and balance later moves one task off that
//     member through a learner, without a pause (a stale local copy is
//     not worth the imbalance);
//  3. else nil: the caller picks the member with the most room.
//
// A caught-up member is always preferred to the balanced target, because
// a cold owner pauses the task for a restore and a warm one does not.
func (b *balancer) pickOrphanOwner(i int, cands []*member) *member {
	p := b.p
	k := kindOf(p.tasks[i].Stateful)
	var best *member
	bestWarm := false
	for _, m := range cands {
		if b.room(m, k) <= 0 {
			continue
		}
		warm := p.caughtUp(i, m.id)
		switch {
		case best == nil:
		case warm && !bestWarm:
		case warm == bestWarm && warm && b.room(m, k) > b.room(best, k):
		default:
			continue
		}
		best, bestWarm = m, warm
	}
	if best != nil {
		return best
	}
	for _, m := range cands {
		if p.caughtUp(i, m.id) {
			return m
		}
	}
	return nil
}

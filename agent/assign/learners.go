package assign

import (
	"cmp"
	"slices"
)

// learnerWant is a stateful task whose destination needs a learner.
type learnerWant struct {
	task     int
	m        *member
	existing bool // the learner is in the current assignment
	leaving  bool // the task's owner is leaving
	pos      uint64
}

// reconcile turns destinations into actions. A stateless task whose
// destination is not its owner is revoked at once. A stateful one keeps or
// gets a learner on its destination (unless the destination is a standby,
// which is warm already), within the learner bounds and, in stable mode,
// only when no round is in flight; it is revoked once that learner or
// standby has caught up and the handover mode allows it, or when its
// leaving owner's leave timeout has passed.
func (p *planner) reconcile() {
	var wants []learnerWant
	for i := range p.tasks {
		t := p.next[i]
		if t.Active == "" {
			continue
		}
		d := p.task[i].dest
		// Cold mode (a baseline for benchmarks) moves stateful tasks like
		// stateless ones: the new owner restores before it serves.
		if !p.tasks[i].Stateful || p.cfg.Handover == Cold {
			if p.tasks[i].Stateful {
				// Learners left from another mode (one warming ahead
				// of its worker, say) are kept only on the destination.
				p.dropLearnersExcept(i, p.plannedTarget(i), reasonNotNeeded)
			}
			if t.Revoke == nil && d != nil && d.id != t.Active {
				p.startRevoke(i, d, p.moveReason(i))
			}
			continue
		}
		// to is the member that should hold the task's learner: its
		// destination, or, if the task stays, a detached member it is
		// bound for once that member's worker attaches (warm ahead).
		keep, to := "", (*member)(nil)
		switch {
		case t.Revoke != nil:
			keep = t.Revoke.Target
		case d != nil && d.id != t.Active:
			to = d
		default:
			to = p.warmTarget(i)
		}
		if to != nil {
			keep = to.id
		}
		p.dropLearnersExcept(i, keep, reasonNotNeeded)
		if to == nil || p.hasStandby(i, to.id) {
			continue
		}
		owner := p.byID[t.Active]
		wants = append(wants, learnerWant{task: i, m: to, existing: p.learnerOn(i, to.id), leaving: owner.leaving, pos: p.position(i, to)})
	}
	// Revokes first: a learner that has caught up and is being promoted
	// no longer counts against the learner bounds, so its slot goes to
	// the next learner in the same generation.
	if p.cfg.Handover == Stable {
		p.pruneRound() // learners dropped above leave the round
	}
	p.startRevokes()
	p.admitLearners(wants)
}

// plannedTarget is the member task i is being moved to: its revoke target,
// else its destination if that is not its owner; "" if it stays.
func (p *planner) plannedTarget(i int) string {
	t, d := p.next[i], p.task[i].dest
	switch {
	case t.Revoke != nil:
		return t.Revoke.Target
	case d != nil && d.id != t.Active:
		return d.id
	}
	return ""
}

// dropLearnersExcept removes task i's learners other than keep.
func (p *planner) dropLearnersExcept(i int, keep, reason string) {
	t := p.next[i]
	if len(t.Learners) == 0 {
		return
	}
	kept := t.Learners[:0]
	for _, l := range t.Learners {
		if l.Member == keep {
			kept = append(kept, l)
			continue
		}
		p.move(i, MoveLearnerDrop, "", l.Member, reason)
	}
	t.Learners = nilIfEmpty(kept)
}

// admitLearners keeps existing learners and adds new ones while the bounds
// allow, in this order: existing learners, then the tasks of leaving
// members, then destinations with the furthest local copy, then task ID.
// The bounds (Config.MaxLearners over the group, MaxLearnersPerMember on
// each member; 0 is no bound) count the learners still catching up: the
// learner of a task being revoked has caught up and is waiting for the
// release, so it always stays and no longer counts. In stable mode new
// learners start only when the previous round has been revoked, and form
// the next round.
func (p *planner) admitLearners(wants []learnerWant) {
	total := 0
	clear(p.learnersOn)
	defer func() { p.learnerTotal = total }()
	wants = slices.DeleteFunc(wants, func(w learnerWant) bool { return p.next[w.task].Revoke != nil })
	fits := func(m *member) bool {
		return (p.cfg.MaxLearners <= 0 || total < p.cfg.MaxLearners) &&
			(p.cfg.MaxLearnersPerMember <= 0 || p.learnersOn[m.index] < p.cfg.MaxLearnersPerMember)
	}
	slices.SortFunc(wants, func(a, b learnerWant) int {
		if a.existing != b.existing {
			return boolFirst(a.existing)
		}
		if a.leaving != b.leaving {
			return boolFirst(a.leaving)
		}
		if c := cmp.Compare(b.pos, a.pos); c != 0 {
			return c
		}
		return cmp.Compare(a.task, b.task)
	})
	for _, w := range wants {
		if !w.existing {
			continue
		}
		if fits(w.m) {
			p.learnersOn[w.m.index]++
			total++
			continue
		}
		p.dropLearnersExcept(w.task, "", reasonMaxLearners)
	}
	stable := p.cfg.Handover == Stable
	if stable {
		p.pruneRound()
		if p.round != nil {
			return
		}
	}
	for _, w := range wants {
		if w.existing || !fits(w.m) {
			continue
		}
		p.learnersOn[w.m.index]++
		total++
		t := p.next[w.task]
		t.Learners = append(t.Learners, Learner{Member: w.m.id, Since: p.now})
		p.task[w.task].newLearner = true
		p.move(w.task, MoveLearnerAdd, t.Active, w.m.id, p.moveReason(w.task))
	}
	if stable {
		var ids []string
		for i := range p.tasks {
			if t := p.next[i]; t.Revoke == nil && len(t.Learners) > 0 && p.moving(i) {
				ids = append(ids, p.tasks[i].ID)
			}
		}
		if len(ids) > 0 {
			p.round = &Round{ID: p.in.Current.Generation + 1, Started: p.now, Tasks: ids}
		}
	}
}

// boolFirst orders true before false for two different bools.
func boolFirst(a bool) int {
	if a {
		return -1
	}
	return 1
}

// pruneRound drops from the stable round the tasks that are being
// revoked (their learner caught up with the round's) or whose move was
// cancelled (no learner left, or one that only warms ahead of a detached
// member's worker), and ends the round when none is left.
func (p *planner) pruneRound() {
	r := p.round
	if r == nil {
		return
	}
	kept := r.Tasks[:0]
	for _, id := range r.Tasks {
		i, ok := p.taskIndex[id]
		if !ok {
			continue
		}
		if t := p.next[i]; t.Revoke == nil && len(t.Learners) > 0 && p.moving(i) {
			kept = append(kept, id)
		}
	}
	r.Tasks = kept
	if len(kept) == 0 {
		p.round = nil
	}
}

// roundTasks marks the tasks of the stable round.
func (p *planner) roundTasks() []bool {
	if p.round == nil {
		return nil
	}
	in := make([]bool, len(p.tasks))
	for _, id := range p.round.Tasks {
		in[p.taskIndex[id]] = true
	}
	return in
}

// roundReady reports whether the round's learners may be promoted: all of
// them have caught up (or are being promoted), or the round has waited
// Config.StableMaxWait. Each is still promoted only once caught up.
func (p *planner) roundReady() bool {
	r := p.round
	if r == nil || !p.now.Before(r.Started.Add(p.cfg.StableMaxWait.D())) {
		return true
	}
	for _, id := range r.Tasks {
		i := p.taskIndex[id]
		if t := p.next[i]; t.Revoke == nil && !p.learnerReady(i) {
			return false
		}
	}
	return true
}

// learnerReady reports whether task i's learner appeared in a published
// generation and has caught up.
func (p *planner) learnerReady(i int) bool {
	t := p.next[i]
	return len(t.Learners) == 1 && !p.task[i].newLearner && p.caughtUp(i, t.Learners[0].Member)
}

// startRevokes revokes each stateful task whose destination is warm and
// caught up, if the handover mode allows, and each task of a leaving member
// whose leave timeout passed, caught up or not.
func (p *planner) startRevokes() {
	ready := p.roundReady()
	inRound := p.roundTasks()
	for i := range p.tasks {
		t := p.next[i]
		d := p.task[i].dest
		if !p.tasks[i].Stateful || t.Active == "" || t.Revoke != nil || d == nil || d.id == t.Active {
			continue
		}
		warm := (p.hasStandby(i, d.id) || p.wasStandby(i, d.id)) && p.caughtUp(i, d.id) || p.learnerOn(i, d.id) && p.learnerReady(i)
		if warm && (ready || inRound == nil || !inRound[i]) {
			p.startRevoke(i, d, p.moveReason(i))
			continue
		}
		if owner := p.byID[t.Active]; owner.leaving && !p.now.Before(p.leaveDeadline(owner)) {
			p.startRevoke(i, d, reasonLeaveTimeout)
		}
	}
}

// wasStandby reports whether m is a standby of task i in the current
// assignment: its copy is warm even if this plan trimmed the entry.
func (p *planner) wasStandby(i int, m string) bool {
	return p.current[i] != nil && slices.Contains(p.current[i].Standbys, m)
}

func (p *planner) startRevoke(i int, to *member, reason string) {
	t := p.next[i]
	rv := &Revoke{Target: to.id, Since: p.now, Reason: reason, Generation: p.in.Current.Generation + 1}
	if p.direct {
		rv.Epoch = p.mintEpoch(i)
	}
	t.Revoke = rv
	p.move(i, MoveRevoke, t.Active, to.id, reason)
}

// moveReason is why task i moves: its owner leaves, or balance.
func (p *planner) moveReason(i int) string {
	if p.byID[p.next[i].Active].leaving {
		return reasonLeave
	}
	return reasonBalance
}

// buildSlots returns a function that reserves room on m for one more
// standby being built (one that has not caught up) under Config.MaxLearners
// and MaxLearnersPerMember, after the learners admitLearners kept, and
// reports whether it did; with anyway it counts the build whatever the
// bounds. What is being built already is counted when the first build asks.
func (p *planner) buildSlots() func(m *member, anyway bool) bool {
	var building []int // by member index, counted when a move first asks
	total := p.learnerTotal
	return func(m *member, anyway bool) bool {
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
}

package assign

// warmAhead sets warmDest, the member each task would be balanced onto if
// every eligible member whose worker is detached (not lost) had it
// attached. reconcile gives such a member a learner for the stateful tasks
// bound for it, so that it warms them before its worker is up and takes
// them over as soon as it attaches; it never gets an active task, a revoke
// or a failover while detached.
//
// It runs after balance, and runs balance again on the same planner state
// with those members counted as active-capable and the moves balance chose
// held where it sends them (so that the hypothetical target agrees with
// what this plan does, and the next plan finds the same one); then it
// restores what the second balance changed. It does nothing (and costs
// nothing) when no eligible member is detached, or in cold mode, where
// stateful tasks have no learners.
func (p *planner) warmAhead() {
	if p.cfg.Handover == Cold || !p.anyDetached() {
		return
	}
	saved := make([]member, len(p.members))
	for j, m := range p.members {
		saved[j] = *m
	}
	actives, dest, moving, orphan, pinned := p.actives, p.dest, p.movingOut, p.isOrphan, p.isPinned
	p.held = make([]*member, len(p.tasks))
	for i, d := range dest {
		if d != nil && (orphan[i] || d.id != p.next[i].Active) {
			p.held[i] = d
		}
	}
	p.actives = make([]*member, 0, len(p.eligible))
	for _, m := range p.eligible {
		if !m.lost {
			m.attached = true
			m.aidx = len(p.actives)
			p.actives = append(p.actives, m)
		}
	}
	p.dest, p.movingOut = make([]*member, len(p.tasks)), nil
	p.balance()
	p.warmDest = p.dest
	for j, m := range p.members {
		*m = saved[j]
	}
	p.actives, p.dest, p.movingOut, p.isOrphan, p.isPinned = actives, dest, moving, orphan, pinned
	p.held = nil
}

// anyDetached reports whether an eligible member's worker is detached.
func (p *planner) anyDetached() bool {
	for _, m := range p.eligible {
		if !m.attached && !m.lost {
			return true
		}
	}
	return false
}

// warmTarget is the detached member that should warm task i ahead of its
// worker (see warmAhead), or nil. A task that got a new owner in this plan
// keeps such a learner but gets no new one: where the hypothetical balance
// would send it depends on where the real one placed it, so it is left to
// the next plan.
func (p *planner) warmTarget(i int) *member {
	if p.warmDest == nil {
		return nil
	}
	w := p.warmDest[i]
	if w == nil || w.attached || w.id == p.next[i].Active || p.fixed[i] && !p.learnerOn(i, w.id) {
		return nil
	}
	return w
}

package assign

import "slices"

// setDestinations sets each task's dest: balance over the members whose
// worker is attached. When an eligible member's worker is detached (not
// lost), it also sets warmDest, where the same balance would send each
// task if every such member had its worker attached. reconcile gives such
// a member a learner for the stateful tasks bound for it, so that it warms
// them before its worker is up and takes them over as soon as it attaches;
// it never gets an active task, a revoke or a failover while detached.
//
// The second balance holds every move the first one chose where it sends
// it, so that the hypothetical target agrees with what this plan does and
// the next plan finds the same one. There is none (and no cost) when no
// eligible member is detached, or in cold mode, where stateful tasks have
// no learners.
func (p *planner) setDestinations() {
	// The stateless tasks whose destination is not their owner are revoked
	// in this plan (reconcile), and the next plan counts them for their
	// targets: balance again counting them there, until the revokes agree
	// with the balance that counted them, so that the next plan, counting
	// this one's revokes, finds the same quotas.
	dest := p.balance(p.attached, nil, nil)
	revoking := p.statelessRevokes(dest)
	for n := 0; revoking != nil && n < maxRebalances; n++ {
		dest = p.balance(p.attached, nil, revoking)
		again := p.statelessRevokes(dest)
		if slices.Equal(revoking, again) {
			break
		}
		revoking = again
	}
	for i, d := range dest {
		p.task[i].dest = d
	}
	if p.cfg.Handover == Cold || !p.anyDetached() {
		return
	}
	held := make([]*member, len(p.tasks))
	for i, d := range dest {
		if d != nil && (p.orphan(i) || d.id != p.next[i].Active) {
			held[i] = d
		}
	}
	capable := make([]*member, 0, len(p.eligible))
	for _, m := range p.eligible {
		if !m.lost {
			capable = append(capable, m)
		}
	}
	for i, d := range p.balance(capable, held, revoking) {
		p.task[i].warmDest = d
	}
}

// maxRebalances bounds the balances setDestinations makes to count the
// stateless revokes of its plan where they go.
const maxRebalances = 4

// statelessRevokes returns, by task, the target of the revoke this plan
// starts for each stateless task that dest moves (reconcile), or nil if it
// starts none.
func (p *planner) statelessRevokes(dest []*member) []*member {
	var out []*member
	for i, d := range dest {
		t := p.next[i]
		if p.tasks[i].Stateful && p.cfg.Handover != Cold || t.Active == "" || t.Revoke != nil || d == nil || d.id == t.Active {
			continue
		}
		if out == nil {
			out = make([]*member, len(dest))
		}
		out[i] = d
	}
	return out
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
// worker (see setDestinations), or nil. A task that got a new owner in
// this plan keeps such a learner but gets no new one: where the
// hypothetical balance would send it depends on where the real one placed
// it, so it is left to the next plan.
func (p *planner) warmTarget(i int) *member {
	w := p.task[i].warmDest
	if w == nil || w.attached || w.id == p.next[i].Active || p.task[i].newOwner && !p.learnerOn(i, w.id) {
		return nil
	}
	return w
}

package assign

import "time"

// trackLeaving builds the next Assignment.Leaving: the time the leader first
// saw each live member leaving. Members that died or stopped leaving drop out.
func (p *planner) trackLeaving() {
	for _, m := range p.members {
		if !m.leaving {
			continue
		}
		since, ok := p.in.Current.Leaving[m.id]
		if !ok {
			since = p.now
		}
		if p.leaving == nil {
			p.leaving = make(map[string]time.Time)
		}
		p.leaving[m.id] = since
	}
}

// cleanup removes what refers to members that can no longer hold it:
// learners and standbys on dead or leaving members or on the owner itself,
// any on stateless tasks, every standby when Config.Standbys is 0, and
// revokes whose target died, is leaving or has no worker attached. Tasks
// whose owner died are left to placeOrphans.
func (p *planner) cleanup() {
	for i := range p.tasks {
		t := p.next[i]
		stateful := p.tasks[i].Stateful
		if len(t.Learners) > 0 {
			kept := t.Learners[:0]
			for _, l := range t.Learners {
				if why := p.unfit(i, l.Member, stateful); why != "" {
					p.move(i, MoveLearnerDrop, "", l.Member, why)
					continue
				}
				if len(kept) > 0 && kept[len(kept)-1].Member == l.Member {
					continue // a duplicate entry (learners are sorted)
				}
				if p.hasStandby(i, l.Member) {
					// The standby is warm already; it serves as the learner.
					p.move(i, MoveLearnerDrop, "", l.Member, reasonNotNeeded)
					continue
				}
				kept = append(kept, l)
			}
			t.Learners = nilIfEmpty(kept)
		}
		if len(t.Standbys) > 0 {
			kept := t.Standbys[:0]
			for _, s := range t.Standbys {
				if why := p.unfit(i, s, stateful); why != "" {
					p.move(i, MoveStandbyDrop, "", s, why)
					continue
				}
				if len(kept) > 0 && kept[len(kept)-1] == s {
					continue
				}
				kept = append(kept, s)
			}
			t.Standbys = nilIfEmpty(kept)
			if p.cfg.Standbys <= 0 {
				for _, s := range t.Standbys {
					p.move(i, MoveStandbyDrop, "", s, reasonTooMany)
				}
				t.Standbys = nil
			}
		}
		if t.Revoke == nil {
			continue
		}
		owner := p.byID[t.Active]
		if t.Active != "" && owner == nil {
			continue // the owner died; placeOrphans moves the task
		}
		target := p.byID[t.Revoke.Target]
		switch {
		case t.Active == "":
			p.cancelRevoke(i, nil, reasonNotNeeded)
		case t.Revoke.Target == "":
			// A retirement (the group's last members leaving): it stands
			// while nobody can take the task, and is withdrawn once
			// someone can, so that the task moves through a learner.
			if len(p.attached) > 0 {
				p.cancelRevoke(i, owner, reasonNotNeeded)
			}
		case target == nil:
			p.cancelRevoke(i, owner, reasonTargetDead)
		case target.leaving:
			p.cancelRevoke(i, owner, reasonTargetLeaving)
		case !target.attached:
			// No promotion onto a member whose worker is not there.
			p.cancelRevoke(i, owner, reasonTargetDetached)
		case target == owner:
			p.cancelRevoke(i, owner, reasonIsActive)
		}
	}
}

// unfit says why member id can't be a learner or standby of task i, or "".
func (p *planner) unfit(i int, id string, stateful bool) string {
	m := p.byID[id]
	switch {
	case !stateful:
		return reasonStateless
	case m == nil:
		return reasonMemberDead
	case m.leaving:
		return reasonMemberLeaving
	case id == p.next[i].Active:
		return reasonIsActive
	}
	return ""
}

// cancelRevoke withdraws task i's revoke; the owner keeps the task. If the
// owner had already released it, its worker has stopped: the task is granted
// to it again with a new epoch, which also makes that release stale so that
// a later revoke waits for a fresh one.
func (p *planner) cancelRevoke(i int, owner *member, reason string) {
	t := p.next[i]
	p.move(i, MoveRevokeCancel, t.Active, t.Revoke.Target, reason)
	cancelled := t.Revoke
	t.Revoke = nil
	t.Minted = max(t.Minted, cancelled.Epoch)
	if owner == nil {
		return
	}
	if r, ok := p.released(owner, i, cancelled); ok {
		t.Epoch = p.mintEpoch(i)
		t.HandoffSeq, t.HandoffAt = r.Seq, r.At
		p.task[i].newOwner = true
	}
}

// unassignAll handles a group where no member may own a task: every live
// member is leaving, or no eligible member's worker is attached. A task
// whose owner is alive and leaving is retired: revoked with no target, so
// that its worker stops, makes its last commit and releases it; promote
// then drops it. A task whose owner's worker is detached stays with it (it
// keeps the actives it has). The others (dead owner, lost worker, new
// task) are dropped at once. Either way the epoch is kept and the task
// waits for a member that can take it; its state is safe in the changelog.
func (p *planner) unassignAll() {
	for i := range p.tasks {
		t := p.next[i]
		owner := p.byID[t.Active]
		switch {
		case owner != nil && owner.lost:
			p.move(i, MoveUnassign, t.Active, "", reasonWorkerLost)
		case owner != nil && owner.leaving:
			if t.Revoke == nil {
				t.Revoke = &Revoke{Target: "", Since: p.now, Reason: reasonNoMember, Generation: p.in.Current.Generation + 1}
				p.move(i, MoveRevoke, t.Active, "", reasonNoMember)
			}
			t.Learners, t.Standbys = nil, nil
			continue
		case owner != nil:
			// Detached: it keeps the task. No member can take it over
			// until a worker attaches, so no learner is needed.
			p.dropLearnersExcept(i, "", reasonNotNeeded)
			continue
		case t.Active != "":
			p.move(i, MoveUnassign, t.Active, "", reasonNoMember)
		case p.current[i] == nil:
			p.move(i, MoveUnassign, "", "", reasonNoMember) // a new task nobody can take
		default:
			continue
		}
		*t = TaskAssignment{Epoch: t.Epoch, Minted: t.Minted}
	}
}

package assign

import "time"

var zeroTime time.Time

// promote completes the revokes whose owner released the task at its
// current epoch through the leader (a direct hand-off is adoptHandoffs'),
// or whose release timeout passed: the target becomes the owner at the
// revoke's epoch (or a new one). After a release, HandoffSeq and HandoffAt come from
// it; after a timeout they are zero and the target's epoch marker fences the
// old owner.
func (p *planner) promote() {
	for i := range p.tasks {
		t := p.next[i]
		if t.Revoke == nil || t.Active == "" {
			continue
		}
		owner := p.byID[t.Active]
		if owner == nil {
			continue
		}
		r, released := p.released(owner, i, t.Revoke)
		if !released && p.now.Before(t.Revoke.Since.Add(p.cfg.ReleaseTimeout.D())) {
			continue
		}
		target := t.Revoke.Target
		if target == "" {
			// A retirement: the owner stopped; nobody takes over yet.
			p.move(i, MoveUnassign, owner.id, "", reasonNoMember)
			*t = TaskAssignment{Epoch: t.Epoch, Minted: t.Minted}
			p.task[i].demoted = owner
			continue
		}
		if released {
			p.move(i, MovePromote, owner.id, target, reasonReleased)
			t.HandoffSeq, t.HandoffAt = r.Seq, r.At
		} else {
			p.move(i, MovePromote, owner.id, target, reasonReleaseTimeout)
			t.HandoffSeq, t.HandoffAt = 0, zeroTime
		}
		p.removeMember(i, target)
		t.Epoch = p.revokeEpoch(i)
		t.Active = target
		t.Revoke = nil
		p.task[i].demoted = owner
		p.task[i].newOwner = true
	}
}

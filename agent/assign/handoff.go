package assign

import "time"

// Direct hand-offs. A revoke with an epoch asks the owner to hand the task
// over through its changelog: the owner's release entry names the target
// as the owner at that epoch, and the target takes the task over as soon
// as its tailer sees the entry, without waiting for a plan. The leader
// learns of it afterwards, from the owner's release or the target's
// takeover, and records it (adoptHandoffs). The log is the truth: a
// release entry is final, whatever the plan said meanwhile.

// mintEpoch returns a new epoch for task i, above every epoch given out for
// it (its epoch, its revoke's, and Minted), and records it in Minted: no
// epoch is ever given to two members, so an epoch in the changelog names
// one owner.
func (p *planner) mintEpoch(i int) uint64 {
	t := p.next[i]
	e := max(t.Epoch, t.Minted)
	if t.Revoke != nil {
		e = max(e, t.Revoke.Epoch)
	}
	e++
	t.Minted = e
	return e
}

// revokeEpoch is the epoch task i's target takes when its revoke
// completes: the one minted with the revoke, or a new one for a revoke
// that asked for no direct hand-off.
func (p *planner) revokeEpoch(i int) uint64 {
	if e := p.next[i].Revoke.Epoch; e > 0 {
		return e
	}
	return p.mintEpoch(i)
}

// directHandoffs reports whether revokes ask for direct hand-offs: every
// live member can read release entries.
func (p *planner) directHandoffs() bool {
	for _, m := range p.members {
		if !m.rec.DirectHandoff {
			return false
		}
	}
	return len(p.members) > 0
}

// adoptHandoffs records the direct hand-offs the members report, before
// anything else is planned: a task whose owner's release names a successor,
// or that a member took over at an epoch minted for it, is that member's
// at that epoch, even if its revoke was cancelled meanwhile or the
// successor has died since (then the task fails over from it, later in
// this plan, at an epoch above).
func (p *planner) adoptHandoffs() {
	var takers []*member // the members that report takeovers, by ID
	for _, m := range p.members {
		if len(m.rec.Takeovers) > 0 {
			takers = append(takers, m)
		}
	}
	for i := range p.tasks {
		t := p.next[i]
		if owner := p.byID[t.Active]; owner != nil {
			if r, ok := owner.rec.Released[p.tasks[i].ID]; ok && r.To != "" && r.Epoch == t.Epoch && r.ToEpoch > t.Epoch {
				p.handOver(i, r.To, r.ToEpoch, r.Seq, r.At, reasonHandedOver)
				continue
			}
		}
		minted := t.Minted
		if t.Revoke != nil {
			minted = max(minted, t.Revoke.Epoch)
		}
		if minted <= t.Epoch {
			continue // no epoch above the task's was given out
		}
		for _, m := range takers {
			if tk, ok := m.rec.Takeovers[p.tasks[i].ID]; ok && tk.Epoch > t.Epoch && tk.Epoch <= minted {
				p.handOver(i, m.id, tk.Epoch, tk.Seq, tk.At, reasonTakenOver)
				break
			}
		}
	}
}

// handOver makes to the owner of task i at epoch, after the release entry
// at changelog sequence seq.
func (p *planner) handOver(i int, to string, epoch, seq uint64, at time.Time, reason string) {
	t := p.next[i]
	p.move(i, MovePromote, t.Active, to, reason)
	if old := p.byID[t.Active]; old != nil {
		p.task[i].demoted = old
	}
	p.removeMember(i, to)
	t.Minted = max(t.Minted, epoch)
	t.Active, t.Epoch, t.Revoke = to, epoch, nil
	t.HandoffSeq, t.HandoffAt = seq, at
	p.task[i].newOwner = true
}

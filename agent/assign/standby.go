package assign

import (
	"cmp"
	"slices"
)

// placeStandbys keeps Config.Standbys warm copies of each owned stateful
// task, and spreads them so that each eligible member's stateful actives
// plus standbys are within one of its capacity-weighted share of all
// stateful copies (see standbyQuotas). Members whose worker is detached or
// lost count here: they may hold warm copies.
//
// A standby moves warm: when its member holds more than its quota, a new
// standby is added on a member with room while the old one stays; once
// the new copy has caught up (lag within the acceptable lag) the old one
// is dropped. So a task never has fewer warm copies than configured, and
// one more while a copy moves (see moveStandbys). Standbys being built
// count against Config.MaxLearners and MaxLearnersPerMember, after the
// learners.
//
// Missing standbys go to eligible members that are not the owner, a
// learner, the revoke target or a standby of the task, preferring in this
// order: a zone that the owner and the other standbys don't use, a member
// with room under its quota, one with local state (or the owner the task
// was just promoted away from), the most room, the lower ID. A standby
// moves for balance only to a member with room, and never out of a zone
// no other copy uses into one that another copy uses; a member none of
// whose standbys can move to a member with room sheds one through a middle
// member (see shedThroughMiddle).
//
// The standbys of a task that is moving (see moving) are neither added nor
// moved until it arrives: its learner or standby target is a warm copy for
// failover meanwhile, and a stable set of standbys keeps the move's
// destination from shifting between plans.
func (p *planner) placeStandbys() {
	want := max(p.cfg.Standbys, 0)
	for _, m := range p.members {
		m.standbys = 0
	}
	var stateful []int
	for i := range p.tasks {
		if !p.tasks[i].Stateful {
			continue
		}
		t := p.next[i]
		for _, s := range t.Standbys {
			p.byID[s].standbys++
		}
		if t.Active != "" {
			stateful = append(stateful, i)
		}
	}
	if len(stateful) == 0 || len(p.eligible) == 0 {
		return
	}
	p.need = make([]int, len(p.tasks))
	p.holder = make([]*member, len(p.tasks))
	for _, i := range stateful {
		p.need[i] = p.standbysWanted(i, want)
		if m := p.plannedOwner(i); m != nil {
			p.holder[i] = m
		} else if m := p.byID[p.next[i].Active]; m != nil && m.eligible {
			p.holder[i] = m
		}
	}
	// Fill first, then balance what is there: the quotas that decide
	// moves see every standby of this plan, so the next plan, seeing the
	// same, decides the same.
	p.standbyQuotas(stateful, want)
	var zp *zonePicker
	filled := false
	for _, i := range stateful {
		t := p.next[i]
		need := p.need[i]
		switch {
		case p.moving(i):
			if len(t.Standbys) > need {
				p.trimStandbys(i, need)
				filled = true
			}
		case len(t.Standbys) < need:
			if zp == nil {
				zp = newZonePicker(p.eligible)
			}
			p.addStandbys(i, need, zp)
			filled = true
		}
	}
	// Then finish the moves whose new copy has caught up, and start the
	// moves the standbys left then call for.
	inFlight := p.standbyInFlight(stateful, want)
	if inFlight {
		p.standbyQuotas(stateful, want)
		// Clear cases first: two moves through one member leave copies
		// tied until the other move has finished.
		var settled map[*member][]int
		settledOnce := func() map[*member][]int {
			if settled == nil {
				settled = p.settledStandbys(stateful)
			}
			return settled
		}
		if !p.lastStandbyMove(stateful) {
			settledOnce = nil
		}
		for _, strict := range []bool{true, false} {
			for _, i := range stateful {
				if need := p.need[i]; !p.moving(i) && len(p.next[i].Standbys) > need {
					p.finishStandbyMove(i, need, strict, settledOnce)
				}
			}
		}
	}
	if filled || inFlight {
		p.standbyQuotas(stateful, want)
	}
	p.moveStandbys(stateful, want)
}

// addStandbys fills task i's standbys up to need.
func (p *planner) addStandbys(i, need int, zp *zonePicker) {
	t := p.next[i]
	used := p.zonesUsed(i, "")
	excluded := p.standbyExcluded(i)
	added := false
	for len(t.Standbys) < need {
		m := p.pickStandby(i, zp, excluded, used, true)
		if m == nil {
			break
		}
		t.Standbys = append(t.Standbys, m.id)
		used = append(used, m.zone)
		zp.add(m)
		added = true
		p.move(i, MoveStandbyAdd, t.Active, m.id, reasonStandbys)
	}
	if added {
		slices.Sort(t.Standbys)
	}
}

// zonesUsed lists the zones of task i's owner and standbys, but skip's.
func (p *planner) zonesUsed(i int, skip string) []string {
	t := p.next[i]
	var used []string
	if owner := p.byID[t.Active]; owner != nil {
		used = append(used, owner.zone)
	}
	for _, s := range t.Standbys {
		if s != skip {
			used = append(used, p.byID[s].zone)
		}
	}
	return used
}

// standbyExcluded reports the members that cannot be a new standby of task
// i: its owner, its standbys, its learners and its revoke target.
func (p *planner) standbyExcluded(i int) func(*member) bool {
	t := p.next[i]
	return func(m *member) bool {
		return m.id == t.Active || p.hasStandby(i, m.id) || p.learnerOn(i, m.id) ||
			t.Revoke != nil && t.Revoke.Target == m.id
	}
}

// moving reports whether task i is on its way to another member.
func (p *planner) moving(i int) bool {
	t := p.next[i]
	return t.Revoke != nil || p.dest[i] != nil && p.dest[i].id != t.Active
}

// trimStandbys keeps want of task i's standbys: the revoke target (or the
// task's destination) first, then the lowest lag, then the lowest ID.
func (p *planner) trimStandbys(i, want int) {
	t := p.next[i]
	target := ""
	if t.Revoke != nil {
		target = t.Revoke.Target
	} else if d := p.dest[i]; d != nil {
		target = d.id
	}
	order := slices.Clone(t.Standbys)
	slices.SortStableFunc(order, func(a, b string) int {
		if (a == target) != (b == target) {
			return boolFirst(a == target)
		}
		return cmp.Compare(p.lag(i, a), p.lag(i, b))
	})
	for _, s := range order[want:] {
		p.move(i, MoveStandbyDrop, t.Active, s, reasonTooMany)
		if m := p.byID[s]; m != nil {
			m.standbys--
		}
	}
	kept := order[:want]
	slices.Sort(kept)
	t.Standbys = nilIfEmpty(kept)
}

// pickStandby chooses a new standby for task i (see placeStandbys), or nil.
// Unless fill, only members in a zone the task's copies don't use, or with
// room, are considered.
func (p *planner) pickStandby(i int, zp *zonePicker, excluded func(*member) bool, used []string, fill bool) *member {
	warm := func(unusedZone bool) *member {
		var best *member
		consider := func(m *member) {
			if m == nil || !m.eligible || excluded(m) || m.standbys >= m.squota || unusedZone && slices.Contains(used, m.zone) {
				return
			}
			if best == nil || standbyLess(m, best) {
				best = m
			}
		}
		consider(p.demoted[i])
		for _, e := range p.pos.of(i) {
			consider(e.m)
		}
		return best
	}
	if m := warm(true); m != nil {
		return m
	}
	if m := zp.pick(excluded, used, false); m != nil && (fill || m.standbys < m.squota) {
		if m.standbys < m.squota {
			return m
		}
		if w := warm(false); w != nil {
			return w
		}
		return m
	}
	if m := warm(false); m != nil {
		return m
	}
	m := zp.pick(excluded, used, true)
	if m != nil && !fill && m.standbys >= m.squota {
		return nil
	}
	return m
}

// standbyLess orders standby candidates: most room under the standby quota,
// then ID.
func standbyLess(a, b *member) bool {
	ra, rb := a.squota-a.standbys, b.squota-b.standbys
	if ra != rb {
		return ra > rb
	}
	return a.id < b.id
}

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
// one more while a copy moves. Standbys being built count against
// Config.MaxLearners and MaxLearnersPerMember, after the learners.
//
// Missing standbys go to eligible members that are not the owner, a
// learner, the revoke target or a standby of the task, preferring in this
// order: a zone that the owner and the other standbys don't use, a member
// with room under its quota, one with local state (or the owner the task
// was just promoted away from), the most room, the lower ID. A standby
// moves for balance only to a member with room, and never out of a zone
// no other copy uses into one that another copy uses.
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
		for _, strict := range []bool{true, false} {
			for _, i := range stateful {
				if need := p.need[i]; !p.moving(i) && len(p.next[i].Standbys) > need {
					p.finishStandbyMove(i, need, strict)
				}
			}
		}
	}
	if filled || inFlight {
		p.standbyQuotas(stateful, want)
	}
	p.moveStandbys(stateful, want)
}

// moveStandbys starts standby moves off each member above its standby
// quota (its standbys in tasks that are not already moving one count),
// trying its tasks from the highest ID down until one has a member with
// room to take the copy, as many as it is above.
func (p *planner) moveStandbys(stateful []int, want int) {
	excess := map[*member]int{}
	var over []*member
	for _, m := range p.eligible {
		if m.standbys > m.squota {
			excess[m] = m.standbys - m.squota
		}
	}
	if len(excess) == 0 {
		return
	}
	on := map[*member][]int{}
	for _, i := range stateful {
		t := p.next[i]
		if p.moving(i) {
			continue
		}
		inFlight := len(t.Standbys) > p.need[i]
		for _, s := range t.Standbys {
			m := p.byID[s]
			if _, ok := excess[m]; !ok {
				continue
			}
			if inFlight {
				excess[m]-- // being resolved by that move
				continue
			}
			on[m] = append(on[m], i)
		}
	}
	for _, m := range p.eligible {
		if excess[m] > 0 && len(on[m]) > 0 {
			over = append(over, m)
		}
	}
	if len(over) == 0 {
		return
	}
	budget := p.buildBudget()
	zp := newZonePicker(p.eligible)
	for _, m := range over {
		tasks := on[m]
		// A copy placed in this plan is not warm yet: it is simply
		// placed again. A copy from before moves warm.
		for j := len(tasks) - 1; j >= 0 && excess[m] > 0; j-- {
			if i := tasks[j]; !p.wasStandby(i, m.id) && p.replaceStandby(i, m, zp) {
				excess[m]--
			}
		}
		for j := len(tasks) - 1; j >= 0 && excess[m] > 0; j-- {
			i := tasks[j]
			if len(p.next[i].Standbys) > p.need[i] {
				continue // one move at a time per task
			}
			if p.wasStandby(i, m.id) && p.startStandbyMove(i, m.id, zp, budget) {
				excess[m]--
			}
		}
	}
}

// replaceStandby moves task i's standby on m, placed in this plan, to a
// member with room; it reports whether it did.
func (p *planner) replaceStandby(i int, from *member, zp *zonePicker) bool {
	t := p.next[i]
	used := p.zonesUsed(i, from.id)
	m := p.pickStandby(i, zp, p.standbyExcluded(i), used, false)
	if m == nil || m.standbys >= m.squota || slices.Contains(used, m.zone) && !slices.Contains(used, from.zone) {
		return false
	}
	t.Standbys[slices.Index(t.Standbys, from.id)] = m.id
	slices.Sort(t.Standbys)
	from.standbys--
	zp.add(m)
	for j := range p.moves {
		if mv := &p.moves[j]; mv.Task == p.tasks[i].ID && mv.Kind == MoveStandbyAdd && mv.To == from.id {
			mv.To = m.id
			break
		}
	}
	return true
}

// standbyInFlight reports whether a task has a standby move to finish.
func (p *planner) standbyInFlight(stateful []int, want int) bool {
	for _, i := range stateful {
		if !p.moving(i) && len(p.next[i].Standbys) > p.need[i] {
			return true
		}
	}
	return false
}

// standbysWanted is how many standbys task i can have: Config.Standbys,
// or fewer if there are not enough eligible members other than its owner.
func (p *planner) standbysWanted(i, want int) int {
	others := len(p.eligible)
	if m := p.byID[p.next[i].Active]; m != nil && m.eligible {
		others--
	}
	return min(want, others)
}

// standbyQuotas sets each eligible member's standby quota: the copies share
// (floor or ceiling of its capacity-weighted share of every owned stateful
// task's active plus its standbys) less the stateful tasks planned to end
// on it, never below zero, adding up to the standbys wanted. Spares go
// first to members that hold more standbys than their floor (so that
// nothing moves in a balanced group), then by the largest fractional part,
// then by ID. Where actives alone exceed a member's copies share (the
// balance of actives wins), its standbys go to the members most below
// theirs.
func (p *planner) standbyQuotas(stateful []int, want int) {
	var sum uint64
	for _, m := range p.eligible {
		sum += m.weight
		m.squota = 0
		m.owned[statefulKind] = 0 // reused: planned stateful actives
		m.settled = m.standbys
	}
	total, copies := 0, 0
	for _, i := range stateful {
		n := p.need[i]
		total += n
		copies += n + 1
		// A copy still being built for a move does not make its member
		// sticky: the quotas must not follow the moves they start.
		if len(p.next[i].Standbys) > n {
			for _, s := range p.next[i].Standbys {
				if !p.caughtUp(i, s) {
					p.byID[s].settled--
				}
			}
		}
		if m := p.holder[i]; m != nil {
			m.owned[statefulKind]++
		}
	}
	type cand struct {
		m     *member
		share share
		over  bool
	}
	cs := make([]cand, len(p.eligible))
	left := total
	for j, m := range p.eligible {
		sh := shareOf(copies, m.weight, sum)
		m.squota = max(0, sh.floor-m.owned[statefulKind])
		left -= m.squota
		cs[j] = cand{m, sh, m.settled > m.squota}
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if a.over != b.over {
			return boolFirst(a.over)
		}
		if c := cmp.Compare(b.share.frac, a.share.frac); c != 0 {
			return c
		}
		return cmp.Compare(a.m.id, b.m.id)
	})
	for j := range cs {
		if left <= 0 {
			break
		}
		c := cs[j]
		if c.share.frac > 0 && c.share.floor >= c.m.owned[statefulKind] {
			c.m.squota++
			left--
		}
	}
	// Conflicts: hand out or take back what is left by how far each
	// member's copies are from its share.
	gap := func(m *member) int64 {
		return int64(m.owned[statefulKind]+m.squota)*int64(sum) - int64(copies)*int64(m.weight)
	}
	for left != 0 {
		var pick *member
		for _, m := range p.eligible {
			switch {
			case left > 0 && (pick == nil || gap(m) < gap(pick)):
				pick = m
			case left < 0 && m.squota > 0 && (pick == nil || gap(m) > gap(pick)):
				pick = m
			}
		}
		if pick == nil {
			return
		}
		if left > 0 {
			pick.squota++
			left--
		} else {
			pick.squota--
			left++
		}
	}
}

// finishStandbyMove trims task i, which has more standbys than need, once
// the copies it keeps have caught up: those on the members most above their
// quota go first, then the highest lag. If strict, it also waits while the
// last copy kept and the first dropped are on members equally above. It waits while a kept copy is still being
// built.
func (p *planner) finishStandbyMove(i, need int, strict bool) {
	t := p.next[i]
	order := slices.Clone(t.Standbys)
	excess := func(s string) int { m := p.byID[s]; return m.standbys - m.squota }
	slices.SortStableFunc(order, func(a, b string) int {
		if c := cmp.Compare(excess(a), excess(b)); c != 0 {
			return c // the member most above its quota loses its copy
		}
		return cmp.Compare(p.lag(i, a), p.lag(i, b))
	})
	for _, s := range order[:need] {
		if !p.caughtUp(i, s) {
			return
		}
	}
	if strict && need > 0 && excess(order[need-1]) == excess(order[need]) {
		return
	}
	for _, s := range order[need:] {
		reason := reasonTooMany
		if m := p.byID[s]; m.standbys > m.squota {
			reason = reasonBalance
		}
		p.move(i, MoveStandbyDrop, t.Active, s, reason)
		p.byID[s].standbys--
	}
	kept := order[:need]
	slices.Sort(kept)
	t.Standbys = nilIfEmpty(kept)
}

// startStandbyMove builds a new standby of task i on a member with room,
// to replace the standby on member gone once it has caught up, if the
// learner bounds leave room for one more copy being built. It reports
// whether it did.
func (p *planner) startStandbyMove(i int, gone string, zp *zonePicker, budget *buildBudget) bool {
	t := p.next[i]
	used := p.zonesUsed(i, gone)
	from := p.byID[gone]
	excluded := p.standbyExcluded(i)
	m := p.pickStandby(i, zp, excluded, used, false)
	if m == nil || m.standbys >= m.squota {
		return false
	}
	if slices.Contains(used, m.zone) && !slices.Contains(used, from.zone) {
		return false // the move would lose a zone
	}
	if !budget.take(m) {
		return false
	}
	t.Standbys = append(t.Standbys, m.id)
	slices.Sort(t.Standbys)
	zp.add(m)
	p.move(i, MoveStandbyAdd, t.Active, m.id, reasonBalance)
	return true
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

// buildBudget is what the learner bounds leave for standbys being built.
type buildBudget struct {
	p     *planner
	total int
}

func (p *planner) buildBudget() *buildBudget { return &buildBudget{p: p, total: -1} }

// count counts, the first time a build is asked for, the standbys being
// built (not caught up) on each member and in all.
func (b *buildBudget) count() {
	if b.total >= 0 {
		return
	}
	p := b.p
	b.total = p.learnerTotal
	for _, m := range p.members {
		m.building = 0
	}
	for i := range p.tasks {
		for _, s := range p.next[i].Standbys {
			if !p.caughtUp(i, s) {
				p.byID[s].building++
				b.total++
			}
		}
	}
}

// take reserves one standby build on m, if the bounds allow.
func (b *buildBudget) take(m *member) bool {
	cfg := b.p.cfg
	if cfg.MaxLearners <= 0 && cfg.MaxLearnersPerMember <= 0 {
		return true
	}
	b.count()
	if cfg.MaxLearners > 0 && b.total >= cfg.MaxLearners {
		return false
	}
	if cfg.MaxLearnersPerMember > 0 && m.learners+m.building >= cfg.MaxLearnersPerMember {
		return false
	}
	b.total++
	m.building++
	return true
}

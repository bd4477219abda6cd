package assign

import (
	"cmp"
	"slices"
)

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

package assign

// placeOrphans gives an owner at once to each task that has none: the tasks
// of dead members (failover) and unowned ones (a new group or task, or one
// unassigned while no member was eligible). Nobody serves these tasks, so
// no learner is waited for: each goes to the most caught-up eligible member
// (see pickOwner), with epoch+1 and no hand-off sequence.
func (p *planner) placeOrphans() {
	var orphans []int
	for i := range p.tasks {
		t := p.next[i]
		if t.Active == "" || p.byID[t.Active] == nil {
			orphans = append(orphans, i)
			continue
		}
		if m := p.plannedOwner(i); m != nil {
			m.load[kindOf(p.tasks[i].Stateful)]++
		}
	}
	if len(orphans) == 0 {
		return
	}
	var total [2]int
	for i := range p.tasks {
		total[kindOf(p.tasks[i].Stateful)]++
	}
	var rooms [2]*roomHeap
	p.countOwned()
	for _, k := range []kind{statefulKind, statelessKind} {
		setQuotas(p.eligible, k, total[k])
		for _, m := range p.eligible {
			m.room[k] = m.quota[k] - m.load[k]
		}
	}
	for _, i := range orphans {
		k := kindOf(p.tasks[i].Stateful)
		m := p.warmOwner(i)
		if m == nil {
			if rooms[k] == nil {
				rooms[k] = newRoomHeap(k, p.eligible)
			}
			m = rooms[k].top()
		}
		if rooms[k] != nil {
			rooms[k].take(m)
		} else {
			m.room[k]--
		}
		m.load[k]++
		t := p.next[i]
		if t.Active == "" {
			p.move(i, MoveAssign, "", m.id, reasonUnowned)
		} else {
			p.move(i, MoveFailover, t.Active, m.id, reasonOwnerDead)
		}
		p.removeMember(i, m.id)
		t.Active = m.id
		t.Epoch++
		t.Revoke = nil
		t.HandoffSeq, t.HandoffAt = 0, zeroTime
	}
}

// warmOwner picks the eligible member that can serve orphan task i soonest:
// a standby (lowest lag, then ID), else a learner (likewise), else the
// member whose local copy reaches furthest. For a stateless task it is the
// target of an interrupted revoke. Nil if none.
func (p *planner) warmOwner(i int) *member {
	t := p.next[i]
	if !p.tasks[i].Stateful {
		if t.Revoke != nil {
			if m := p.byID[t.Revoke.Target]; m != nil && m.eligible {
				return m
			}
		}
		return nil
	}
	if m := p.leastLagged(i, t.Standbys); m != nil {
		return m
	}
	ids := make([]string, 0, len(t.Learners))
	for _, l := range t.Learners {
		ids = append(ids, l.Member)
	}
	if m := p.leastLagged(i, ids); m != nil {
		return m
	}
	if ps := p.pos.of(i); len(ps) > 0 {
		return ps[0].m
	}
	return nil
}

// leastLagged returns the eligible member of ids with the lowest lag for
// task i, ties broken by ID.
func (p *planner) leastLagged(i int, ids []string) *member {
	var best *member
	var bestLag uint64
	for _, id := range ids {
		m := p.byID[id]
		if m == nil || !m.eligible {
			continue
		}
		l := p.lag(i, id)
		if best == nil || l < bestLag || (l == bestLag && id < best.id) {
			best, bestLag = m, l
		}
	}
	return best
}

package assign

import (
	"cmp"
	"math"
	"slices"
)

// kind separates the two task types.
type kind int

const (
	statefulKind kind = iota
	statelessKind
)

func kindOf(stateful bool) kind {
	if stateful {
		return statefulKind
	}
	return statelessKind
}

// maxWeight bounds a member's capacity so that total*weight cannot overflow.
const maxWeight = math.MaxUint32

// weight is a member's capacity as the quotas use it: below 1 counts as 1.
func weight(capacity int) uint64 {
	switch {
	case capacity < 1:
		return 1
	case uint64(capacity) > maxWeight:
		return maxWeight
	}
	return uint64(capacity)
}

// setQuotas gives each member ms[j] its quota of stateful and of stateless
// tasks in load[j].quota, total[k] of each kind, so that three axes balance at once: each
// member's stateful quota, its stateless quota and their sum are each the
// floor or the ceiling of its capacity-weighted share. The quotas of each
// kind add up to total[k].
//
// Each member starts at the floors of its two shares; the tasks the floors
// leave of each kind (the spares) go one per member at most, to members
// whose share of that kind has a fractional part, so that each member's sum
// stays within its share of all actives: a member whose two fractional
// parts add up to one or more needs one spare, and may take two only if
// they add up to more than one. Among the ways to do that, setQuotas picks
// one that keeps the most tasks where they are (load[j].owned): a spare of a kind
// is worth one kept task to a member that owns more of that kind than its
// floor. That is a small transportation problem over member types, solved
// exactly (minCostFlow); within a type, spares go by the largest fractional
// part, then by ID.
//
// Keeping tasks makes plans sticky: re-planning a balanced state gives the
// same quotas, and a member that joins or leaves moves no more tasks than
// the change of shares requires. A stateful task counts for its owner, not
// its planned destination: quotas must not depend on anything a plan itself
// changes (learners), or the next plan would undo its own decisions. A
// stateless task being revoked counts for its revoke target, and so does
// one its plan revokes (balancer.counted): its move starts and ends without
// a learner, and counted for its owner until the end, the end changed the
// quotas, and members traded stateless tasks generation after generation.
func setQuotas(ms []*member, load []memberLoad, total [2]int) {
	if len(ms) == 0 {
		return
	}
	var sum uint64
	for _, m := range ms {
		sum += m.weight
	}
	var spare [2]int
	qs := make([]quotaMember, len(ms))
	types := map[quotaType][]*quotaMember{}
	for i, m := range ms {
		q := &qs[i]
		q.m, q.l = m, &load[i]
		for k := range 2 {
			num := uint64(total[k]) * m.weight
			q.l.quota[k] = int(num / sum)
			q.frac[k] = num % sum
		}
		var t quotaType
		t.may[0], t.may[1] = q.frac[0] > 0, q.frac[1] > 0
		t.need = q.frac[0]+q.frac[1] >= sum && t.may[0] // both parts are then positive
		t.both = q.frac[0]+q.frac[1] > sum
		t.gain[0] = b2i(q.l.owned[0] > q.l.quota[0])
		t.gain[1] = b2i(q.l.owned[1] > q.l.quota[1])
		types[t] = append(types[t], q)
	}
	for k := range 2 {
		spare[k] = total[k]
		for j := range ms {
			spare[k] -= load[j].quota[k]
		}
	}
	keys := make([]quotaType, 0, len(types))
	for t := range types {
		keys = append(keys, t)
	}
	slices.SortFunc(keys, compareQuotaTypes)
	counts := make([]int, len(keys))
	for j, t := range keys {
		counts[j] = len(types[t])
	}
	given := spreadSpares(keys, counts, spare)
	for j, t := range keys {
		t.hand(types[t], given[j])
	}
}

// quotaMember is one member while setQuotas rounds its shares.
type quotaMember struct {
	m    *member
	l    *memberLoad
	frac [2]uint64 // fractional parts of its shares (numerators)
}

// quotaType is what matters about a member when spares are handed out.
type quotaType struct {
	may  [2]bool // its share of the kind has a fractional part
	need bool    // it must take one spare (of either kind)
	both bool    // it may take one spare of each kind
	gain [2]int  // a spare of the kind keeps one more of its tasks
}

func compareQuotaTypes(a, b quotaType) int {
	key := func(t quotaType) int {
		return b2i(t.may[0]) | b2i(t.may[1])<<1 | b2i(t.need)<<2 | b2i(t.both)<<3 | t.gain[0]<<4 | t.gain[1]<<5
	}
	return cmp.Compare(key(a), key(b))
}

// hand gives the members of one type their spares: given[k] of kind k.
// Stateful spares go by the largest fractional part (then ID); stateless
// ones first to members that need a spare and have none, then likewise to
// members that may still take one.
func (t quotaType) hand(ms []*quotaMember, given [2]int) {
	sorted := func(k kind) []int {
		out := make([]int, len(ms))
		for i := range out {
			out[i] = i
		}
		slices.SortFunc(out, func(a, b int) int {
			if c := cmp.Compare(ms[b].frac[k], ms[a].frac[k]); c != 0 {
				return c
			}
			return cmp.Compare(ms[a].m.id, ms[b].m.id)
		})
		return out
	}
	stateful := make([]bool, len(ms))
	for _, i := range sorted(statefulKind)[:given[statefulKind]] {
		ms[i].l.quota[statefulKind]++
		stateful[i] = true
	}
	took := make([]bool, len(ms))
	n := given[statelessKind]
	order := sorted(statelessKind)
	give := func(i int) {
		ms[i].l.quota[statelessKind]++
		took[i] = true
		n--
	}
	if t.need {
		for _, i := range order {
			if n > 0 && !stateful[i] {
				give(i)
			}
		}
	}
	for _, i := range order {
		if n > 0 && !took[i] && (!stateful[i] || t.both) {
			give(i)
		}
	}
}

// spreadSpares decides how many spares of each kind each member type gets:
// given[j][k] for type keys[j] with counts[j] members, spare[k] in all,
// keeping as many tasks as possible. It is a min-cost flow from the two
// kinds to the types; a type's members take at most one spare of each
// kind, at least one in all if they need one and at most one in all
// unless they may take both.
func spreadSpares(keys []quotaType, counts []int, spare [2]int) [][2]int {
	// Nodes: 0 source, 1 and 2 the kinds, 3.. the types, then the sink.
	n := len(keys)
	g := newFlowGraph(n + 4)
	src, sink := 0, n+3
	g.edge(src, 1, spare[0], 0)
	g.edge(src, 2, spare[1], 0)
	const must = -1 << 20 // a needed spare outweighs any number of kept tasks
	kindEdge := make([][2]int, n)
	for j, t := range keys {
		c := counts[j]
		for k := range 2 {
			kindEdge[j][k] = -1
			if t.may[k] {
				kindEdge[j][k] = g.edge(1+k, 3+j, c, -t.gain[k])
			}
		}
		lo, hi := 0, c
		if t.need {
			lo = c
		}
		if t.both {
			hi = 2 * c
		}
		if lo > 0 {
			g.edge(3+j, sink, lo, must)
		}
		if hi > lo {
			g.edge(3+j, sink, hi-lo, 0)
		}
	}
	g.minCostFlow(src, sink)
	given := make([][2]int, n)
	for j := range keys {
		for k := range 2 {
			if e := kindEdge[j][k]; e >= 0 {
				given[j][k] = g.flow(e)
			}
		}
	}
	return given
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// share is a member's capacity-weighted share of some tasks: floor plus a
// fractional part frac/sum.
type share struct {
	floor int
	frac  uint64
}

func shareOf(total int, w, sum uint64) share {
	num := uint64(total) * w
	return share{floor: int(num / sum), frac: num % sum}
}

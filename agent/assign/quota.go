package assign

import (
	"math"
	"sort"
)

// kind separates the two task types, balanced independently.
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

// setQuotas gives each eligible member its quota of total tasks of kind k:
// the floor of its capacity-weighted share, plus one of the remaining tasks
// for as many members as there are remaining tasks. The remainders go
// first to members that own more tasks than their floor (m.owned), since
// they would otherwise have to shed one; then by the largest fractional
// part of the share; then by member ID. Every quota is within one of the
// exact share and the quotas sum to total.
//
// The first rule keeps plans sticky: re-planning a balanced state gives the
// same quotas, and a member that joins or leaves moves no more tasks than
// the change of shares requires. It counts owners rather than planned
// destinations because only a completed move changes owners: quotas must
// not depend on anything a plan itself changes (learners), or the next
// plan would undo its own decisions.
func setQuotas(eligible []*member, k kind, total int) {
	if len(eligible) == 0 {
		return
	}
	var sum uint64
	for _, m := range eligible {
		sum += m.weight
	}
	type rest struct {
		m    *member
		over bool
		frac uint64 // numerator over sum
	}
	rests := make([]rest, len(eligible))
	given := 0
	for i, m := range eligible {
		num := uint64(total) * m.weight
		floor := int(num / sum)
		m.quota[k] = floor
		given += floor
		rests[i] = rest{m: m, over: m.owned[k] > floor, frac: num % sum}
	}
	left := total - given
	if left == 0 {
		return
	}
	sort.Slice(rests, func(i, j int) bool {
		a, b := rests[i], rests[j]
		if a.over != b.over {
			return a.over
		}
		if a.frac != b.frac {
			return a.frac > b.frac
		}
		return a.m.id < b.m.id
	})
	for i := 0; i < left; i++ {
		rests[i].m.quota[k]++
	}
}

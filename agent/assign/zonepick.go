package assign

import (
	"container/heap"
	"slices"
	"sort"
)

// zonePicker finds the member with the fewest standbys (then the lowest ID)
// outside a few excluded members and, optionally, outside a few used zones,
// without scanning the group: each zone keeps a heap of its members and a
// heap orders the zones by their best member, so a pick costs
// O((zones skipped + members skipped) · log n).
type zonePicker struct {
	order  zoneOrder
	byZone map[string]*zoneMembers
}

// zoneMembers is a heap of one zone's members, fewest standbys first.
// Members record their index in it (member.zoneAt).
type zoneMembers struct {
	zone string
	ms   []*member
	idx  int // index in zoneOrder, -1 while popped
}

func newZonePicker(eligible []*member) *zonePicker {
	zp := &zonePicker{byZone: map[string]*zoneMembers{}}
	for _, m := range eligible {
		z := zp.byZone[m.zone]
		if z == nil {
			z = &zoneMembers{zone: m.zone}
			zp.byZone[m.zone] = z
			zp.order = append(zp.order, z)
		}
		m.zoneAt = len(z.ms)
		z.ms = append(z.ms, m)
	}
	sort.Slice(zp.order, func(i, j int) bool { return zp.order[i].zone < zp.order[j].zone })
	for i, z := range zp.order {
		z.idx = i
		heap.Init(z)
	}
	heap.Init(&zp.order)
	return zp
}

// add records one more standby on m.
func (zp *zonePicker) add(m *member) {
	m.standbys++
	z := zp.byZone[m.zone]
	heap.Fix(z, m.zoneAt)
	heap.Fix(&zp.order, z.idx)
}

// pick returns the best member that is not excluded and, unless anyZone,
// not in a used zone; nil if none.
func (zp *zonePicker) pick(excluded func(*member) bool, used []string, anyZone bool) *member {
	var best *member
	var popped []*zoneMembers
	for zp.order.Len() > 0 {
		z := zp.order[0]
		if best != nil && !standbyLess(z.ms[0], best) {
			break // no member of this zone or of the ones after it beats best
		}
		heap.Pop(&zp.order)
		popped = append(popped, z)
		if !anyZone && slices.Contains(used, z.zone) {
			continue
		}
		var aside []*member
		for z.Len() > 0 && excluded(z.ms[0]) {
			aside = append(aside, heap.Pop(z).(*member))
		}
		if z.Len() > 0 && (best == nil || standbyLess(z.ms[0], best)) {
			best = z.ms[0]
		}
		for _, m := range aside {
			heap.Push(z, m)
		}
	}
	for _, z := range popped {
		heap.Push(&zp.order, z)
	}
	return best
}

func (z *zoneMembers) Len() int           { return len(z.ms) }
func (z *zoneMembers) Less(i, j int) bool { return standbyLess(z.ms[i], z.ms[j]) }
func (z *zoneMembers) Swap(i, j int) {
	z.ms[i], z.ms[j] = z.ms[j], z.ms[i]
	z.ms[i].zoneAt = i
	z.ms[j].zoneAt = j
}
func (z *zoneMembers) Push(x any) {
	m := x.(*member)
	m.zoneAt = len(z.ms)
	z.ms = append(z.ms, m)
}
func (z *zoneMembers) Pop() any {
	m := z.ms[len(z.ms)-1]
	z.ms = z.ms[:len(z.ms)-1]
	m.zoneAt = -1
	return m
}

// zoneOrder is a heap of zones by their best member.
type zoneOrder []*zoneMembers

func (o zoneOrder) Len() int           { return len(o) }
func (o zoneOrder) Less(i, j int) bool { return standbyLess(o[i].ms[0], o[j].ms[0]) }
func (o zoneOrder) Swap(i, j int) {
	o[i], o[j] = o[j], o[i]
	o[i].idx = i
	o[j].idx = j
}
func (o *zoneOrder) Push(x any) {
	z := x.(*zoneMembers)
	z.idx = len(*o)
	*o = append(*o, z)
}
func (o *zoneOrder) Pop() any {
	old := *o
	z := old[len(old)-1]
	*o = old[:len(old)-1]
	z.idx = -1
	return z
}

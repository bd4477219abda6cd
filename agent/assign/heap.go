package assign

import "container/heap"

// roomHeap orders a balance's capable members by the room they have for
// tasks of one kind, most room first, then by ID. Members track their
// position in it (memberLoad.heapAt) so that a change of room can be fixed
// in O(log n).
type roomHeap struct {
	k     kind
	b     *balancer
	slots []int
}

func newRoomHeap(k kind, b *balancer) *roomHeap {
	h := &roomHeap{k: k, b: b, slots: make([]int, len(b.capable))}
	for j := range h.slots {
		h.slots[j] = j
		b.load[j].heapAt[k] = j
	}
	heap.Init(h)
	return h
}

func (h *roomHeap) Len() int { return len(h.slots) }

func (h *roomHeap) Less(i, j int) bool {
	a, c := h.slots[i], h.slots[j]
	if ra, rc := h.b.load[a].room[h.k], h.b.load[c].room[h.k]; ra != rc {
		return ra > rc
	}
	return h.b.capable[a].id < h.b.capable[c].id
}

func (h *roomHeap) Swap(i, j int) {
	h.slots[i], h.slots[j] = h.slots[j], h.slots[i]
	h.b.load[h.slots[i]].heapAt[h.k] = i
	h.b.load[h.slots[j]].heapAt[h.k] = j
}

// Push and Pop are heap.Interface's; the heap never grows or shrinks.
func (h *roomHeap) Push(any)     { panic("roomHeap: push") }
func (h *roomHeap) Pop() any     { panic("roomHeap: pop") }
func (h *roomHeap) top() *member { return h.b.capable[h.slots[0]] }

// take gives one task to m: its room shrinks by one.
func (h *roomHeap) take(m *member) {
	l := h.b.loadOf(m)
	l.room[h.k]--
	heap.Fix(h, l.heapAt[h.k])
}

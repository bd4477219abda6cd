package assign

import "container/heap"

// roomHeap orders members by the room they have for tasks of one kind, most
// room first, then by ID. Members track their index in it so that a change
// of room elsewhere can be fixed in O(log n).
type roomHeap struct {
	k  kind
	ms []*member
}

func newRoomHeap(k kind, ms []*member) *roomHeap {
	h := &roomHeap{k: k, ms: make([]*member, len(ms))}
	copy(h.ms, ms)
	for i, m := range h.ms {
		m.heapAt[k] = i
	}
	heap.Init(h)
	return h
}

func (h *roomHeap) Len() int { return len(h.ms) }

func (h *roomHeap) Less(i, j int) bool {
	a, b := h.ms[i], h.ms[j]
	if a.room[h.k] != b.room[h.k] {
		return a.room[h.k] > b.room[h.k]
	}
	return a.id < b.id
}

func (h *roomHeap) Swap(i, j int) {
	h.ms[i], h.ms[j] = h.ms[j], h.ms[i]
	h.ms[i].heapAt[h.k] = i
	h.ms[j].heapAt[h.k] = j
}

func (h *roomHeap) Push(x any) {
	m := x.(*member)
	m.heapAt[h.k] = len(h.ms)
	h.ms = append(h.ms, m)
}

func (h *roomHeap) Pop() any {
	m := h.ms[len(h.ms)-1]
	h.ms = h.ms[:len(h.ms)-1]
	m.heapAt[h.k] = -1
	return m
}

// top returns the member with the most room; the heap must not be empty.
func (h *roomHeap) top() *member { return h.ms[0] }

// take gives one task to m: its room shrinks by one.
func (h *roomHeap) take(m *member) {
	m.room[h.k]--
	if m.heapAt[h.k] >= 0 {
		heap.Fix(h, m.heapAt[h.k])
	}
}

package assign

import (
	"cmp"
	"slices"
)

// positions indexes the eligible members' local state: for each stateful
// task, the members that hold a copy, furthest first (then by ID).
type positions struct {
	entries []posEntry
	// start[i]..start[i+1] delimit task i's entries.
	start []int32
}

type posEntry struct {
	task int32
	m    *member
	pos  uint64
}

func indexPositions(p *view) positions {
	// Count the entries of each task, then place them by task (a counting
	// sort) and order each task's few entries; the map iteration order is
	// irrelevant once sorted.
	start := make([]int32, len(p.tasks)+1)
	n := 0
	for _, m := range p.eligible {
		n += len(m.rec.Positions)
	}
	found := make([]posEntry, 0, n)
	for _, m := range p.eligible {
		for id, pos := range m.rec.Positions {
			if i, ok := p.useful(id, pos); ok {
				start[i+1]++
				found = append(found, posEntry{task: int32(i), m: m, pos: pos})
			}
		}
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	entries := make([]posEntry, len(found))
	fill := slices.Clone(start[:len(start)-1])
	for _, e := range found {
		entries[fill[e.task]] = e
		fill[e.task]++
	}
	for i := range p.tasks {
		if bucket := entries[start[i]:start[i+1]]; len(bucket) > 1 {
			slices.SortFunc(bucket, func(a, b posEntry) int {
				if c := cmp.Compare(b.pos, a.pos); c != 0 {
					return c
				}
				return cmp.Compare(a.m.id, b.m.id)
			})
		}
	}
	return positions{entries: entries, start: start}
}

// useful returns the index of the stateful task a reported position is
// for, if it is worth preferring: a copy at sequence 0 holds nothing.
func (p *view) useful(id string, pos uint64) (int, bool) {
	if pos == 0 {
		return 0, false
	}
	i, ok := p.taskIndex[id]
	return i, ok && p.tasks[i].Stateful
}

// of returns the eligible members holding local state for task i, furthest
// first.
func (ps positions) of(i int) []posEntry {
	return ps.entries[ps.start[i]:ps.start[i+1]]
}

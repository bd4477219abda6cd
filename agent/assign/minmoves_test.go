package assign

// minMoves is the fewest owner changes that reach a balanced assignment
// from the owners in owned (member -> tasks of each kind it owns; tasks of
// other owners must all move): every member of ms ends within one of its
// capacity-weighted share of stateful, of stateless and of all actives.
// It is restated here from the definition, by dynamic programming over the
// members' floor-or-ceiling choices, so that it shares no code with Plan.
func minMoves(ms []Member, owned map[string][2]int, total [2]int) int {
	if len(ms) == 0 {
		return 0
	}
	w := func(m Member) int { return max(m.Capacity, 1) }
	sum := 0
	for _, m := range ms {
		sum += w(m)
	}
	floorCeil := func(n, wi int) (int, int) {
		f := n * wi / sum
		if n*wi%sum != 0 {
			return f, f + 1
		}
		return f, f
	}
	const inf = 1 << 30
	s, l := total[0], total[1]
	// best[x][y]: fewest moves out of the members seen so far, given they
	// end with x stateful and y stateless tasks.
	best := make([][]int, s+1)
	for x := range best {
		best[x] = make([]int, l+1)
		for y := range best[x] {
			best[x][y] = inf
		}
	}
	best[0][0] = 0
	kept := 0
	for _, m := range ms {
		o := owned[m.ID]
		kept += o[0] + o[1]
		sf, sc := floorCeil(s, w(m))
		lf, lc := floorCeil(l, w(m))
		af, ac := floorCeil(s+l, w(m))
		next := make([][]int, s+1)
		for x := range next {
			next[x] = make([]int, l+1)
			for y := range next[x] {
				next[x][y] = inf
			}
		}
		for x := 0; x <= s; x++ {
			for y := 0; y <= l; y++ {
				if best[x][y] == inf {
					continue
				}
				for _, qx := range []int{sf, sc} {
					for _, qy := range []int{lf, lc} {
						if qx+qy < af || qx+qy > ac || x+qx > s || y+qy > l {
							continue
						}
						c := best[x][y] + max(0, o[0]-qx) + max(0, o[1]-qy)
						next[x+qx][y+qy] = min(next[x+qx][y+qy], c)
					}
				}
			}
		}
		best = next
	}
	return best[s][l] + (s + l - kept)
}

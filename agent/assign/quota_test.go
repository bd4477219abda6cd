package assign

import (
	"fmt"
	"testing"
)

// TestQuotasBalanceEveryAxis checks setQuotas over every small group:
// capacities 1..3 for up to five members, up to 12 tasks of each kind and
// any ownership: each kind's quotas add up, and each member's stateful,
// stateless and total quotas are within one of its capacity-weighted share.
func TestQuotasBalanceEveryAxis(t *testing.T) {
	caps := [][]int{{1}, {1, 1}, {1, 2}, {1, 1, 1}, {1, 2, 3}, {3, 1, 1, 2}, {1, 1, 1, 1, 1}, {2, 2, 1, 3, 1}}
	for _, cp := range caps {
		for s := 0; s <= 12; s++ {
			for l := 0; l <= 12; l++ {
				for own := range 4 {
					ms := make([]*member, len(cp))
					load := make([]memberLoad, len(cp))
					for i, c := range cp {
						ms[i] = &member{id: fmt.Sprintf("m%d", i), weight: uint64(c)}
						// a few ownership patterns: none, all on the first, spread, skewed
						switch own {
						case 1:
							if i == 0 {
								load[i].owned = [2]int{s, l}
							}
						case 2:
							load[i].owned = [2]int{(s + i) / len(cp), (l + len(cp) - 1 - i) / len(cp)}
						case 3:
							load[i].owned = [2]int{s * (i + 1) % 5, l * (i + 2) % 4}
						}
					}
					setQuotas(ms, load, [2]int{s, l})
					checkQuotas(t, load, cp, s, l)
				}
			}
		}
	}
}

func checkQuotas(t *testing.T, load []memberLoad, cp []int, s, l int) {
	t.Helper()
	sum := 0
	for _, c := range cp {
		sum += c
	}
	var got [2]int
	for i, m := range load {
		got[0] += m.quota[0]
		got[1] += m.quota[1]
		for _, ax := range []struct {
			name  string
			q, of int
		}{{"stateful", m.quota[0], s}, {"stateless", m.quota[1], l}, {"all", m.quota[0] + m.quota[1], s + l}} {
			// |q - of*c/sum| < 1, in integers.
			if d := ax.q*sum - ax.of*cp[i]; d >= sum || -d >= sum {
				t.Fatalf("capacities %v, %d stateful, %d stateless: %s quota of m%d is %d, share %.2f", cp, s, l, ax.name, i, ax.q, float64(ax.of*cp[i])/float64(sum))
			}
		}
	}
	if got != [2]int{s, l} {
		t.Fatalf("capacities %v: quotas add up to %v, want %v", cp, got, [2]int{s, l})
	}
}

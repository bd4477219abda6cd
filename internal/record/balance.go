package record

import (
	"fmt"

	"github.com/handoffhq/handoff/api"
)

// Balanced checks that gv is a finished, balanced assignment over members:
// every task active on one of them, no learner or revoke in flight, and
// each member's count within one of the others', stateful and stateless
// separately.
func Balanced(gv api.GroupView, members ...string) error {
	want := make(map[string]bool, len(members))
	for _, m := range members {
		want[m] = true
	}
	counts := map[bool]map[string]int{true: {}, false: {}}
	for _, t := range gv.Tasks {
		if !want[t.Active] {
			return fmt.Errorf("task %s is active on %q, want one of %v", t.ID, t.Active, members)
		}
		if len(t.Learners) > 0 || t.Revoking != "" {
			return fmt.Errorf("task %s is still moving (learners %v, revoking to %q)", t.ID, t.Learners, t.Revoking)
		}
		counts[t.Stateful][t.Active]++
	}
	for stateful, cs := range counts {
		lo, hi := -1, -1
		for _, m := range members {
			n := cs[m]
			if lo < 0 || n < lo {
				lo = n
			}
			hi = max(hi, n)
		}
		if hi-lo > 1 {
			return fmt.Errorf("unbalanced (stateful=%v): %v", stateful, cs)
		}
	}
	return nil
}

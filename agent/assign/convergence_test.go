package assign

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestConvergence simulates scaling steps with learners that catch up at
// once and owners that release at once, checks each plan's invariants and
// that the group settles balanced with every task moved at most once, and
// logs how many generations and learner waves it took next to Kafka
// Streams' bound for the same moves: one probing rebalance per
// max.warmup.replicas (2) warm-ups, plus one, each up to
// probing.rebalance.interval.ms (10 minutes) apart. Run with -v for the
// table.
func TestConvergence(t *testing.T) {
	type scenario struct {
		tasks, members int
		op             string // "scale-up": one member joins; "leave": one leaves
		mode           Mode
		maxLearners    int
	}
	var scenarios []scenario
	for _, size := range []struct{ tasks, members int }{{64, 4}, {1000, 10}} {
		if testing.Short() && size.tasks > 100 {
			continue
		}
		for _, op := range []string{"scale-up", "leave"} {
			for _, mode := range []Mode{Eager, Stable} {
				for _, ml := range []int{0, 8} {
					scenarios = append(scenarios, scenario{size.tasks, size.members, op, mode, ml})
				}
			}
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-5s %-7s %-8s %-6s %-7s | %5s %5s %5s %4s | %s\n",
		"tasks", "members", "op", "mode", "maxL", "moved", "gens", "waves", "peak", "Kafka Streams: probing rebalances (≈ minutes)")
	for _, sc := range scenarios {
		cfg := config(fmt.Sprintf("s-0..%d", sc.tasks-1), "", func(c *Config) {
			c.Handover = sc.mode
			c.MaxLearnersPerMember = 4
			c.MaxLearners = sc.maxLearners
		})
		in := Input{Config: cfg, Now: t0}
		for i := range sc.members {
			in.Members = append(in.Members, Member{ID: fmt.Sprintf("m%02d", i)})
		}
		in.Current = settle(t, in)
		in.Now = t0.Add(time.Hour)
		from := fmt.Sprintf("%d→%d", sc.members, sc.members+1)
		if sc.op == "scale-up" {
			in.Members = append(in.Members, Member{ID: "new"})
		} else {
			in.Members[0].Leaving = true
			from = fmt.Sprintf("%d→%d", sc.members, sc.members-1)
		}
		run := Simulate(in, time.Second, 10*sc.tasks, func(in Input, res Result) { checkPlan(t, in, res) })
		if !run.Converged {
			t.Fatalf("%+v: no convergence", sc)
		}
		checkBalanced(t, in.Members, cfg, run.Final.Assignment)
		moved := 0
		for task, n := range run.Moved {
			if n > 1 {
				t.Errorf("%+v: %s moved %d times", sc, task, n)
			}
			moved++
		}
		if sc.op == "leave" && len(run.Final.Shutdown) != 1 {
			t.Errorf("%+v: shutdown %v, want the leaving member", sc, run.Final.Shutdown)
		}
		ks := (moved+1)/2 + 1
		ksNote := fmt.Sprintf("%d (≈%d min)", ks, (ks-1)*10)
		if sc.op == "leave" {
			ksNote = "1, no warm-up: state rebuilt cold on the survivors"
		}
		fmt.Fprintf(&table, "%-5d %-7s %-8s %-6s %-7d | %5d %5d %5d %4d | %s\n",
			sc.tasks, from, sc.op, sc.mode, sc.maxLearners, moved, run.Plans, run.Waves, run.PeakLearners, ksNote)
	}
	t.Log(table.String())
}

// TestConvergenceWithDelays scales up with moves that take time, as they do
// in a group: each owner releases its revoked task a fixed number of plans
// after the revoke (a stateless task then changes owner), each learner
// catches up a fixed number of plans after it was placed, and the newcomers
// come one, then the rest a plan later. Every task must move at most once
// and the group must settle. Before stateless revokes counted for their
// targets in the quotas, two members traded stateless tasks back and forth
// here for as long as the run lasted, and the learners of the stateful
// moves those trades made room for were placed and dropped in turn.
func TestConvergenceWithDelays(t *testing.T) {
	sizes := []int{20}
	if !testing.Short() {
		sizes = append(sizes, 100)
	}
	for _, n := range sizes {
		for _, mode := range []Mode{Eager, Stable} {
			for _, release := range []int{1, 2, 3} {
				for _, catchUp := range []int{1, 3} {
					delayedScaleUp(t, n, mode, release, catchUp)
				}
			}
		}
	}
}

// delayedScaleUp is one case of TestConvergenceWithDelays: n members with
// ten tasks each, a quarter stateless, and n/10 newcomers.
func delayedScaleUp(t *testing.T, n int, mode Mode, release, catchUp int) {
	name := fmt.Sprintf("%d+%d/%s/release-%d/catch-up-%d", n, n/10, mode, release, catchUp)
	t.Run(name, func(t *testing.T) {
		cfg := config(fmt.Sprintf("t-0..%d", 15*n/2-1), fmt.Sprintf("s-0..%d", 5*n/2-1), func(c *Config) {
			c.Handover = mode
			c.MaxLearnersPerMember = 4
		})
		in := Input{Config: cfg, Now: t0}
		for i := range n {
			in.Members = append(in.Members, Member{ID: fmt.Sprintf("m%04d", i+1), DirectHandoff: true})
		}
		in.Current = settle(t, in)
		in.Now = t0.Add(time.Hour)
		in.Members = append(in.Members, Member{ID: fmt.Sprintf("m%04d", n+1), DirectHandoff: true})
		var rest []Member
		for i := 1; i < n/10; i++ {
			rest = append(rest, Member{ID: fmt.Sprintf("m%04d", n+i+1), DirectHandoff: true})
		}
		run := SimulateDelayed(in, [][]Member{rest}, release, catchUp, 300, func(in Input, res Result) { checkPlan(t, in, res) })
		if !run.Converged {
			t.Fatalf("no convergence in %d plans (most moves of one task: %d)", run.Plans, mostMoves(run.Moved))
		}
		all := append(in.Members, rest...)
		checkBalanced(t, all, cfg, run.Final.Assignment)
		if m := mostMoves(run.Moved); m > 1 {
			t.Errorf("a task moved %d times", m)
		}
	})
}

// mostMoves is the most times one task moved.
func mostMoves(moved map[string]int) int {
	most := 0
	for _, n := range moved {
		most = max(most, n)
	}
	return most
}

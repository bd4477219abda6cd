package assign

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestPlanProperties drives random groups (members in zones) through
// random events (joins, leaves, deaths, progress, releases, time,
// reconfiguration), checks every invariant of each plan (checkPlan, zones
// included), then lets the group settle with every learner caught up and
// every revoke released and checks that it converges to a balanced
// assignment, its tasks' copies spread over the zones, that planning again
// does not change.
func TestPlanProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := newWorld(t)
		steps := rapid.IntRange(0, 40).Draw(t, "steps")
		for range steps {
			w.step(t)
			in := w.input()
			res := Plan(in)
			checkPlan(t, in, res)
			w.publish(res)
		}
		// Every worker attaches, then the group settles.
		for _, m := range w.live {
			m.Worker = WorkerAttached
		}
		converge(t, w.input())
	})
}

// converge settles in and checks the settled assignment.
func converge(t *rapid.T, in Input) {
	tasks, _ := in.Config.Tasks()
	limit := 4*len(tasks) + 20
	run := Simulate(in, time.Second, limit, func(in Input, res Result) { checkPlan(t, in, res) })
	if !run.Converged {
		t.Fatalf("no convergence after %d plans; last:\n%s", limit, js(run.Final))
	}
	checkBalanced(t, in.Members, in.Config, run.Final.Assignment)
	if bad := checkZoneSpan(in.Members, in.Config, run.Final.Assignment); len(bad) > 0 {
		t.Fatalf("settled, yet %v\n%s", bad, js(run.Final.Assignment))
	}
}

// checkBalanced checks a settled assignment: no learners or revokes left,
// every eligible member within one of its capacity-weighted share of each
// kind of task, leaving members owning nothing, standbys filled.
func checkBalanced(t fataler, members []Member, cfg Config, a Assignment) {
	t.Helper()
	tasks, _ := cfg.Tasks()
	var sum uint64
	eligible := map[string]uint64{}
	for _, m := range members {
		if !m.Leaving {
			w := uint64(max(m.Capacity, 1)) // restated, not weight(): the check must not share the code it checks
			eligible[m.ID] = w
			sum += w
		}
	}
	var total [2]uint64
	count := map[string]*[2]uint64{}
	for id := range eligible {
		count[id] = &[2]uint64{}
	}
	for _, task := range tasks {
		ta := a.Tasks[task.ID]
		if len(ta.Learners) > 0 || ta.Revoke != nil {
			t.Fatalf("settled, yet %s has learners or a revoke: %s", task.ID, js(ta))
		}
		k := kindOf(task.Stateful)
		total[k]++
		if len(eligible) == 0 {
			continue
		}
		c, ok := count[ta.Active]
		if !ok {
			t.Fatalf("settled, yet %s is owned by %q, which is not eligible", task.ID, ta.Active)
		}
		c[k]++
		if task.Stateful {
			if want := min(max(cfg.Standbys, 0), len(eligible)-1); len(ta.Standbys) != want {
				t.Fatalf("settled, yet %s has %d standbys, want %d", task.ID, len(ta.Standbys), want)
			}
		}
	}
	for id, w := range eligible {
		for k := range 2 {
			// |count - total*w/sum| <= 1, in integers.
			have, share := count[id][k]*sum, total[k]*w
			if have > share+sum || share > have+sum {
				t.Fatalf("settled, yet %s holds %d of %d tasks (kind %d), share %.2f\n%s",
					id, count[id][k], total[k], k, float64(share)/float64(sum), js(a))
			}
		}
	}
}

// TestPlanScaleUpMovesOnlyWhatIsNeeded settles a random group, adds a member
// with no state and settles again: each task moves at most once, and the
// number of moves is the fewest that balance every axis (minMoves).
func TestPlanScaleUpMovesOnlyWhatIsNeeded(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		n := rapid.IntRange(1, 6).Draw(t, "members")
		equal := rapid.Bool().Draw(t, "equalCapacity")
		in := Input{Config: cfg, Now: epoch0}
		for i := range n {
			c := 1
			if !equal {
				c = rapid.IntRange(1, 4).Draw(t, "capacity")
			}
			in.Members = append(in.Members, Member{ID: fmt.Sprintf("m%d", i), Capacity: c})
		}
		before := settle(t, in)
		newcomer := Member{ID: "new", Capacity: 1}
		if !equal {
			newcomer.Capacity = rapid.IntRange(1, 4).Draw(t, "capacity")
		}
		in.Members = append(in.Members, newcomer)
		in.Current = before
		in.Now = epoch0.Add(time.Hour)
		run := Simulate(in, time.Second, 1000, func(in Input, res Result) { checkPlan(t, in, res) })
		if !run.Converged {
			t.Fatalf("no convergence after scale-up")
		}
		after := run.Final.Assignment
		checkBalanced(t, in.Members, cfg, after)
		for task, n := range run.Moved {
			if n > 1 {
				t.Fatalf("%s moved %d times", task, n)
			}
		}
		checkFewestMoves(t, cfg, in.Members, before, after)
	})
}

// checkFewestMoves checks that going from before to after changed as few
// owners as balancing every axis over the eligible members requires.
func checkFewestMoves(t fataler, cfg Config, members []Member, before, after Assignment) {
	t.Helper()
	tasks, _ := cfg.Tasks()
	var eligible []Member
	for _, m := range members {
		if !m.Leaving {
			eligible = append(eligible, m)
		}
	}
	owned := map[string][2]int{}
	var total [2]int
	moves := 0
	for _, task := range tasks {
		k := kindOf(task.Stateful)
		total[k]++
		b := before.Tasks[task.ID]
		if b == nil {
			continue
		}
		c := owned[b.Active]
		c[k]++
		owned[b.Active] = c
		if after.Tasks[task.ID].Active != b.Active {
			moves++
		}
	}
	if need := minMoves(eligible, owned, total); moves != need {
		t.Fatalf("%d owners changed, the fewest that balance is %d (owned before %v)", moves, need, owned)
	}
}

// TestPlanScaleDownMovesOnlyItsTasks settles a random group, then one member
// leaves (or dies: no standbys, so no warm copy pulls other tasks around);
// the owners that change are the fewest that balance every axis again:
// the member's tasks, and others only where the totals require it.
func TestPlanScaleDownMovesOnlyItsTasks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		dies := rapid.Bool().Draw(t, "dies")
		if dies {
			cfg.Standbys = 0
		}
		n := rapid.IntRange(2, 6).Draw(t, "members")
		in := Input{Config: cfg, Now: epoch0}
		for i := range n {
			in.Members = append(in.Members, Member{ID: fmt.Sprintf("m%d", i), Capacity: rapid.IntRange(1, 4).Draw(t, "capacity")})
		}
		before := settle(t, in)
		gone := rapid.IntRange(0, n-1).Draw(t, "gone")
		if dies {
			in.Members = append(in.Members[:gone:gone], in.Members[gone+1:]...)
		} else {
			in.Members[gone].Leaving = true
		}
		in.Current = before
		in.Now = epoch0.Add(time.Hour)
		run := Simulate(in, time.Second, 1000, func(in Input, res Result) { checkPlan(t, in, res) })
		if !run.Converged {
			t.Fatalf("no convergence after scale-down")
		}
		after := run.Final.Assignment
		checkBalanced(t, in.Members, cfg, after)
		checkFewestMoves(t, cfg, in.Members, before, after)
	})
}

// settle plans a new group until it converges.
func settle(t fataler, in Input) Assignment {
	t.Helper()
	run := Simulate(in, time.Second, 1000, nil)
	if !run.Converged {
		t.Fatalf("a new group does not converge")
	}
	return run.Final.Assignment
}

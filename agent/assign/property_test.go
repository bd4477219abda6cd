package assign

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestPlanProperties drives random groups through random events (joins,
// leaves, deaths, progress, releases, time, reconfiguration), checks every
// invariant of each plan (checkPlan), then lets the group settle with every
// learner caught up and every revoke released and checks that it converges
// to a balanced assignment that planning again does not change.
func TestPlanProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := newWorld(t)
		steps := rapid.IntRange(0, 40).Draw(t, "steps")
		for range steps {
			w.step(t)
			in := w.input()
			res := Plan(in)
			checkPlan(t, in, res)
			w.settle(res)
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
// with no state and settles again: each task moves at most once, the number
// of moves of each kind is exactly what the new quotas require
// (sum over members of max(0, count - quota)), and with equal capacities
// that is about T/(N+1).
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
		tasks, _ := cfg.Tasks()
		for _, k := range []kind{statefulKind, statelessKind} {
			counts, moves, total := map[string]int{}, 0, 0
			for _, task := range tasks {
				if kindOf(task.Stateful) != k {
					continue
				}
				total++
				counts[before.Tasks[task.ID].Active]++
				if before.Tasks[task.ID].Active != after.Tasks[task.ID].Active {
					moves++
				}
			}
			quotas := referenceQuotas(in.Members, counts, total)
			need := 0
			for id, c := range counts {
				need += max(0, c-quotas[id])
			}
			if moves != need {
				t.Fatalf("kind %d: %d moves, the quotas %v need %d (counts before %v)", k, moves, quotas, need, counts)
			}
			if equal && (moves < total/(n+1) || moves > (total+n)/(n+1)) {
				t.Fatalf("kind %d: %d moves of %d tasks to a member joining %d", k, moves, total, n)
			}
		}
	})
}

// TestPlanScaleDownMovesOnlyItsTasks settles a random group, then one member
// leaves (or dies: no standbys, so no warm copy pulls other tasks around);
// only that member's tasks change owner.
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
		goneID := in.Members[gone].ID
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
		for id, bt := range before.Tasks {
			if at := after.Tasks[id]; at.Active != bt.Active && bt.Active != goneID {
				t.Fatalf("%s moved %s -> %s although only %s left", id, bt.Active, at.Active, goneID)
			}
		}
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

// referenceQuotas restates the quota rule independently of setQuotas: the
// floor of each share, then one more for as many members as tasks remain:
// members holding more than their floor first, then the largest fractional
// part, then the lowest ID.
func referenceQuotas(members []Member, counts map[string]int, total int) map[string]int {
	w := func(m Member) float64 { return float64(max(m.Capacity, 1)) }
	var sum float64
	for _, m := range members {
		if !m.Leaving {
			sum += w(m)
		}
	}
	type cand struct {
		id    string
		over  bool
		frac  float64
		quota int
	}
	var cs []cand
	left := total
	for _, m := range members {
		if m.Leaving {
			continue
		}
		share := float64(total) * w(m) / sum
		f := int(share + 1e-9)
		left -= f
		cs = append(cs, cand{m.ID, counts[m.ID] > f, share - float64(f), f})
	}
	better := func(a, b cand) bool {
		if a.over != b.over {
			return a.over
		}
		if d := a.frac - b.frac; d > 1e-9 || d < -1e-9 {
			return a.frac > b.frac
		}
		return a.id < b.id
	}
	out := map[string]int{}
	for range left {
		best := -1
		for i := range cs {
			if cs[i].quota == int(float64(total)*w(memberOf(members, cs[i].id))/sum+1e-9) && (best < 0 || better(cs[i], cs[best])) {
				best = i
			}
		}
		cs[best].quota++
	}
	for _, c := range cs {
		out[c.id] = c.quota
	}
	return out
}

func memberOf(members []Member, id string) Member {
	for _, m := range members {
		if m.ID == id {
			return m
		}
	}
	return Member{}
}

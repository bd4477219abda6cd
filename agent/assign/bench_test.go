package assign

import (
	"fmt"
	"testing"
	"time"
)

// bigGroup is a settled group of members (with zones and one standby per
// stateful task), 80% of its tasks stateful, in which every member reports
// local positions for the stateful tasks it owns or stands by for, and every
// standby reports its lag, as a real leader's input would have.
func bigGroup(tb testing.TB, tasks, members int) Input {
	tb.Helper()
	stateful := tasks * 4 / 5
	cfg := config(fmt.Sprintf("s-0..%d", stateful-1), fmt.Sprintf("l-0..%d", tasks-stateful-1), func(c *Config) {
		c.Standbys = 1
		c.MaxLearnersPerMember = 4
	})
	in := Input{Config: cfg, Now: t0}
	for i := range members {
		in.Members = append(in.Members, Member{ID: fmt.Sprintf("worker-%d", i), Zone: fmt.Sprintf("zone-%d", i%3)})
	}
	run := Simulate(in, time.Second, 100, nil)
	if !run.Converged {
		tb.Fatalf("a group of %d tasks and %d members does not settle", tasks, members)
	}
	in.Current = run.Final.Assignment
	in.Now = in.Now.Add(time.Hour)
	idx := map[string]int{}
	for i, m := range in.Members {
		idx[m.ID] = i
		in.Members[i].Positions = map[string]uint64{}
	}
	in.Lags = map[string]map[string]uint64{}
	for id, t := range in.Current.Tasks {
		if id[0] != 's' {
			continue
		}
		in.Members[idx[t.Active]].Positions[id] = 1000
		for _, s := range t.Standbys {
			in.Members[idx[s]].Positions[id] = 990
			setLag(in.Lags, id, s, 10)
		}
	}
	return in
}

// BenchmarkPlan measures one plan of a settled group (steady: nothing
// changes), of the same group right after a member without state joined
// (join: learners and stateless revokes start), and right after a member
// started leaving (leave), and right after a member joined whose worker is
// not up yet (join-detached: it warms ahead, a second balance pass).
func BenchmarkPlan(b *testing.B) {
	for _, size := range []struct{ tasks, members int }{{1000, 100}, {10000, 1000}} {
		in := bigGroup(b, size.tasks, size.members)
		join := in
		join.Members = append(cloneMembers(in.Members), Member{ID: "worker-new", Zone: "zone-0"})
		joinDetached := in
		joinDetached.Members = append(cloneMembers(in.Members), Member{ID: "worker-new", Zone: "zone-0", Worker: WorkerDetached})
		leave := in
		leave.Members = cloneMembers(in.Members)
		leave.Members[0].Leaving = true
		for _, c := range []struct {
			name string
			in   Input
		}{{"steady", in}, {"join", join}, {"leave", leave}, {"join-detached", joinDetached}} {
			b.Run(fmt.Sprintf("%dx%d/%s", size.tasks, size.members, c.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					Plan(c.in)
				}
			})
		}
	}
}

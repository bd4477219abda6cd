package assign

import (
	"fmt"
	"slices"
	"testing"
)

// TestPlanWorkerStates checks what a member's worker state changes: a
// detached worker's member warms copies but gets no new active task and
// keeps the ones it has; a lost worker's tasks move at once, with the
// hand-off its agent released.
func TestPlanWorkerStates(t *testing.T) {
	withWorker := func(ms []Member, id string, w WorkerState) []Member {
		ms = slices.Clone(ms)
		for i := range ms {
			if ms[i].ID == id {
				ms[i].Worker = w
			}
		}
		return ms
	}
	standby := func(c *Config) { c.Standbys = 1 }
	// m1 owns everything, m2 stands by for every stateful task.
	solo := func() Assignment {
		a := placed(3, "s-00=m1", "s-01=m1", "s-02=m1", "s-03=m1", "l-00=m1", "l-01=m1")
		for _, id := range []string{"s-00", "s-01", "s-02", "s-03"} {
			a.Tasks[id].Standbys = []string{"m2"}
		}
		return a
	}
	lost := func(releases map[string]Release) []Member {
		return []Member{{ID: "m1", Worker: WorkerLost, Released: releases}, {ID: "m2"}, {ID: "m3"}}
	}
	tests := []struct {
		name   string
		in     Input
		want   map[string]string
		owners map[string]string // task -> "owner e=epoch seq=handoffSeq"
		moves  []string
	}{
		{
			name: "a detached newcomer gets standbys but no learner and no stateless task",
			in: Input{Config: config(ids("s", 4), ids("l", 2), standby), Now: t0,
				Members: withWorker(members("m1", "m2"), "m2", WorkerDetached),
				Current: placed(3, "s-00=m1", "s-01=m1", "s-02=m1", "s-03=m1", "l-00=m1", "l-01=m1")},
			want: map[string]string{"s-00": "a=m1 e=1 standbys=m2", "s-03": "a=m1 e=1 standbys=m2", "l-00": "a=m1 e=1", "l-01": "a=m1 e=1"},
		},
		{
			name: "the same newcomer, attached, starts its share",
			in: Input{Config: config(ids("s", 4), ids("l", 2), standby), Now: t0,
				Members: members("m1", "m2"), Current: solo(), Lags: lags("s-02/m2=0", "s-03/m2=0")},
			// Its standbys are warm: no learner is needed.
			moves: []string{"l-01 revoke m1>m2 balance", "s-02 revoke m1>m2 balance", "s-03 revoke m1>m2 balance"},
		},
		{
			name: "a detached owner keeps its tasks; nothing moves to balance them",
			in: Input{Config: config(ids("s", 4), ids("l", 2)), Now: t0,
				Members: withWorker(members("m1", "m2"), "m1", WorkerDetached),
				Current: placed(3, "s-00=m1", "s-01=m1", "s-02=m2", "s-03=m2", "l-00=m1", "l-01=m2")},
			moves: []string{},
		},
		{
			name: "a dead member's task fails over past a detached standby",
			in: Input{Config: config(ids("s", 2), "", standby), Now: t0,
				Members: withWorker(members("m1", "m2"), "m1", WorkerDetached),
				Current: with(placed(3, "s-00=m3", "s-01=m2"), func(a *Assignment) { a.Tasks["s-00"].Standbys = []string{"m1"} }),
				Lags:    lags("s-00/m1=0")},
			want: map[string]string{"s-00": "a=m2 e=2 standbys=m1"},
		},
		{
			name: "a revoke towards a member whose worker detached is withdrawn",
			in: Input{Config: config(ids("s", 2), ""), Now: at(1),
				Members: withWorker(members("m1", "m2"), "m2", WorkerDetached),
				Current: with(placed(3, "s-00=m1", "s-01=m1"), func(a *Assignment) {
					a.Tasks["s-01"].Revoke = &Revoke{Target: "m2", Since: at(0), Reason: reasonBalance, Generation: 3}
					a.Tasks["s-01"].Learners = learner("m2", at(0))
				})},
			want:  map[string]string{"s-01": "a=m1 e=1"},
			moves: []string{"s-01 revoke-cancel m1>m2 target-detached", "s-01 learner-drop >m2 not-needed"},
		},
		{
			name: "a lost worker's tasks move at once to their standbys, with the agent's release",
			in: Input{Config: config(ids("s", 4), ids("l", 2), standby), Now: t0, Current: solo(),
				Members: lost(map[string]Release{
					"s-00": {Epoch: 1, Seq: 40, At: at(-1)}, "s-01": {Epoch: 1, Seq: 41, At: at(-1)},
					"s-02": {Epoch: 1, Seq: 42, At: at(-1)}, "l-00": {Epoch: 1, Seq: 7, At: at(-1)},
				})},
			// (standbys are checked by checkPlan; the lost member may hold one)
			owners: map[string]string{
				"s-00": "m2 e=2 seq=40", "s-01": "m2 e=2 seq=41", "s-02": "m3 e=2 seq=42",
				// no release: a failover, fenced by the epoch
				"s-03": "m3 e=2 seq=0",
				"l-00": "m2 e=2 seq=7", "l-01": "m3 e=2 seq=0",
			},
		},
		{
			name: "with no attached member, a lost worker's tasks wait unassigned",
			in: Input{Config: config(ids("s", 1), ""), Now: t0, Current: placed(3, "s-00=m1"),
				Members: []Member{{ID: "m1", Worker: WorkerLost, Released: map[string]Release{"s-00": {Epoch: 1, Seq: 9}}}, {ID: "m2", Worker: WorkerDetached}}},
			want:  map[string]string{"s-00": "a= e=1"},
			moves: []string{"s-00 unassign m1> worker-lost"},
		},
		{
			name: "with no attached member, a detached worker's member keeps its tasks",
			in: Input{Config: config(ids("s", 1), ""), Now: t0, Current: placed(3, "s-00=m1"),
				Members: []Member{{ID: "m1", Worker: WorkerDetached}, {ID: "m2", Worker: WorkerDetached}}},
			want:  map[string]string{"s-00": "a=m1 e=1"},
			moves: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Plan(tt.in)
			checkSummaries(t, res, tt.want)
			for id, want := range tt.owners {
				ta := res.Assignment.Tasks[id]
				if got := fmt.Sprintf("%s e=%d seq=%d", ta.Active, ta.Epoch, ta.HandoffSeq); got != want {
					t.Errorf("Plan(in).Tasks[%s] = %s, want %s", id, got, want)
				}
			}
			if tt.moves != nil {
				if got := moveLines(res.Moves); !slices.Equal(got, tt.moves) && !(len(got) == 0 && len(tt.moves) == 0) {
					t.Errorf("Plan(in).Moves = %q, want %q", got, tt.moves)
				}
			}
			checkPlan(t, tt.in, res)
		})
	}
}

// TestPlanFailoverWeighsLoad: when a member dies, each of its tasks goes to
// a caught-up standby whose member has room under its quota, rather than
// one that would then have to shed a task.
func TestPlanFailoverWeighsLoad(t *testing.T) {
	// m1 died owning s-00 and s-01; both have a standby on m2, and s-01 one
	// on m3 too. m2 and m3 own one task each; the quotas are two each.
	cur := placed(3, "s-00=m1", "s-01=m1", "s-02=m2", "s-03=m3")
	cur.Tasks["s-00"].Standbys = []string{"m2"}
	cur.Tasks["s-01"].Standbys = []string{"m2", "m3"}
	in := Input{Config: config(ids("s", 4), "", func(c *Config) { c.Standbys = 2 }), Now: t0,
		Members: members("m2", "m3"), Current: cur, Lags: lags("s-00/m2=0", "s-01/m2=0", "s-01/m3=0")}
	res := Plan(in)
	checkPlan(t, in, res)
	if got := counts(res.Assignment, nil); got != "m2:2 m3:2" {
		t.Errorf("Plan(in) owners = %s, want m2:2 m3:2 (s-00 to m2, its only standby; s-01 to m3)", got)
	}
	for _, m := range res.Moves {
		if m.Kind == MoveRevoke || m.Kind == MoveLearnerAdd {
			t.Errorf("Plan(in) moves %s after the failover; want none", m.Task)
		}
	}
}

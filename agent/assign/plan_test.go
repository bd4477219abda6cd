package assign

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// ids lists n zero-padded task IDs as one spec: "s-00,s-01,...".
func ids(prefix string, n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return strings.Join(out, ",")
}

// twelve is 12 stateful tasks owned four each by m1, m2, m3.
func twelve() Assignment {
	var pairs []string
	for i := range 12 {
		pairs = append(pairs, fmt.Sprintf("s-%02d=m%d", i, i/4+1))
	}
	return placed(5, pairs...)
}

// with edits a copy of a.
func with(a Assignment, edit func(a *Assignment)) Assignment {
	c := a.Clone()
	edit(&c)
	return c
}

func learner(m string, since time.Time) []Learner { return []Learner{{Member: m, Since: since}} }

func TestPlan(t *testing.T) {
	newcomer := twelve()
	learning := with(twelve(), func(a *Assignment) {
		a.Generation = 6
		for _, id := range []string{"s-03", "s-07", "s-11"} {
			a.Tasks[id].Learners = learner("m4", at(0))
		}
	})
	revoking := with(learning, func(a *Assignment) {
		a.Generation = 7
		a.Tasks["s-03"].Revoke = &Revoke{Target: "m4", Since: at(0), Reason: reasonBalance}
	})
	released := func(ms []Member, id, task string, epoch, seq uint64) []Member {
		ms = slices.Clone(ms)
		for i := range ms {
			if ms[i].ID == id {
				ms[i].Released = map[string]Release{task: {Epoch: epoch, Seq: seq, At: at(3)}}
			}
		}
		return ms
	}
	// A revoke issued by generation 7, and releases of it made at
	// generations 5 (an earlier revoke's, cancelled before the leader saw
	// it) and 7.
	reissued := with(revoking, func(a *Assignment) { a.Tasks["s-03"].Revoke.Generation = 7 })
	releasedAtGen := func(ms []Member, gen uint64) []Member {
		ms = released(ms, "m1", "s-03", 1, 77)
		for i := range ms {
			if r, ok := ms[i].Released["s-03"]; ok {
				r.Generation = gen
				ms[i].Released["s-03"] = r
			}
		}
		return ms
	}
	four := members("m1", "m2", "m3", "m4")
	stable := func(c *Config) { c.Handover = Stable }
	round := with(learning, func(a *Assignment) {
		a.Tasks["s-11"].Learners = nil
		a.Round = &Round{ID: 6, Started: at(0), Tasks: []string{"s-03", "s-07"}}
	})
	leaveCfg := config(ids("s", 6), "l-0")
	leaveState := placed(3, "s-00=m1", "s-01=m1", "s-02=m2", "s-03=m2", "s-04=m3", "s-05=m3", "l-0=m3")
	leaving3 := []Member{{ID: "m1"}, {ID: "m2"}, {ID: "m3", Leaving: true}}
	dead3 := with(leaveState, func(a *Assignment) {
		a.Tasks["s-04"].Standbys = []string{"m1", "m2"}
	})
	zones := []Member{{ID: "m1", Zone: "a"}, {ID: "m2", Zone: "a"}, {ID: "m3", Zone: "b"}}
	oneStandby := func(c *Config) { c.Standbys = 1 }

	tests := []struct {
		name     string
		in       Input
		want     map[string]string // task -> summary; unlisted tasks are not checked
		moves    []string          // nil: not checked
		owners   string            // counts of owners; "": not checked
		shutdown []string
		deadline time.Time
		same     bool // nothing changes
	}{
		{
			name: "new group spreads tasks by quota",
			in:   Input{Config: config(ids("s", 6), ids("l", 3)), Now: t0, Members: members("m1", "m2", "m3")},
			want: map[string]string{
				"l-00": "a=m1 e=1", "l-01": "a=m2 e=1", "l-02": "a=m3 e=1",
				"s-00": "a=m1 e=1", "s-01": "a=m2 e=1", "s-02": "a=m3 e=1",
				"s-03": "a=m1 e=1", "s-04": "a=m2 e=1", "s-05": "a=m3 e=1",
			},
		},
		{
			name: "balanced group changes nothing",
			in:   Input{Config: config(ids("s", 12), ""), Now: t0, Members: members("m1", "m2", "m3"), Current: twelve()},
			same: true,
		},
		{
			name: "newcomer learns its share: each member sheds its highest task",
			in:   Input{Config: config(ids("s", 12), ""), Now: t0, Members: four, Current: newcomer},
			want: map[string]string{
				"s-03": "a=m1 e=1 learners=m4", "s-07": "a=m2 e=1 learners=m4", "s-11": "a=m3 e=1 learners=m4",
				"s-02": "a=m1 e=1",
			},
			moves: []string{"s-03 learner-add m1>m4 balance", "s-07 learner-add m2>m4 balance", "s-11 learner-add m3>m4 balance"},
		},
		{
			name: "learners per member are bounded",
			in: Input{Config: config(ids("s", 12), "", func(c *Config) { c.MaxLearnersPerMember = 2 }),
				Now: t0, Members: four, Current: newcomer},
			moves: []string{"s-03 learner-add m1>m4 balance", "s-07 learner-add m2>m4 balance"},
		},
		{
			name: "learners in the group are bounded",
			in: Input{Config: config(ids("s", 12), "", func(c *Config) { c.MaxLearners = 1 }),
				Now: t0, Members: four, Current: newcomer},
			moves: []string{"s-03 learner-add m1>m4 balance"},
		},
		{
			name: "eager: a caught-up learner is revoked at once, the others wait",
			in: Input{Config: config(ids("s", 12), ""), Now: at(1), Members: four, Current: learning,
				Lags: lags("s-03/m4=100", "s-07/m4=101")},
			want:     map[string]string{"s-03": "a=m1 e=1 revoke=m4/balance learners=m4", "s-07": "a=m2 e=1 learners=m4", "s-11": "a=m3 e=1 learners=m4"},
			moves:    []string{"s-03 revoke m1>m4 balance"},
			deadline: at(11),
		},
		{
			name: "unknown or high lags revoke nothing",
			in:   Input{Config: config(ids("s", 12), ""), Now: at(1), Members: four, Current: learning, Lags: lags("s-07/m4=5000")},
			same: true,
		},
		{
			name: "a release promotes the learner with the hand-off sequence",
			in: Input{Config: config(ids("s", 12), ""), Now: at(5), Members: released(four, "m1", "s-03", 1, 77), Current: revoking,
				Lags: lags("s-03/m4=0")},
			want:  map[string]string{"s-03": "a=m4 e=2 seq=77"},
			moves: []string{"s-03 promote m1>m4 released"},
		},
		{
			name:     "a release of an older epoch is ignored",
			in:       Input{Config: config(ids("s", 12), ""), Now: at(5), Members: released(four, "m1", "s-03", 0, 77), Current: revoking},
			same:     true,
			deadline: at(10),
		},
		{
			name:     "a release made before the revoke was issued is ignored",
			in:       Input{Config: config(ids("s", 12), ""), Now: at(5), Members: releasedAtGen(four, 5), Current: reissued},
			same:     true,
			deadline: at(10),
		},
		{
			name:  "a release made under the revoke promotes",
			in:    Input{Config: config(ids("s", 12), ""), Now: at(5), Members: releasedAtGen(four, 7), Current: reissued, Lags: lags("s-03/m4=0")},
			want:  map[string]string{"s-03": "a=m4 e=2 seq=77"},
			moves: []string{"s-03 promote m1>m4 released"},
		},
		{
			name:  "the release timeout promotes without a sequence",
			in:    Input{Config: config(ids("s", 12), ""), Now: at(10), Members: four, Current: revoking},
			want:  map[string]string{"s-03": "a=m4 e=2"},
			moves: []string{"s-03 promote m1>m4 release-timeout"},
		},
		{
			name: "stable: the round waits for all its learners",
			in: Input{Config: config(ids("s", 12), "", stable), Now: at(30), Members: four, Current: round,
				Lags: lags("s-03/m4=0", "s-07/m4=500")},
			same:     true,
			deadline: at(120),
		},
		{
			name: "stable: a caught-up round is revoked together",
			in: Input{Config: config(ids("s", 12), "", stable), Now: at(30), Members: four, Current: round,
				Lags: lags("s-03/m4=0", "s-07/m4=0")},
			// The round is revoked as a whole, so the next round starts.
			moves: []string{"s-03 revoke m1>m4 balance", "s-07 revoke m2>m4 balance", "s-11 learner-add m3>m4 balance"},
		},
		{
			name: "stable: after the max wait, caught-up learners go one by one",
			in: Input{Config: config(ids("s", 12), "", stable), Now: at(120), Members: four, Current: round,
				Lags: lags("s-03/m4=0", "s-07/m4=500")},
			moves: []string{"s-03 revoke m1>m4 balance"},
		},
		{
			name: "stable: no new learners while a round is in flight",
			in:   Input{Config: config(ids("s", 12), "", stable), Now: at(30), Members: four, Current: round},
			same: true,
		},
		{
			name: "stable: new learners form a round",
			in:   Input{Config: config(ids("s", 12), "", stable, func(c *Config) { c.MaxLearners = 2 }), Now: t0, Members: four, Current: newcomer},
			want: map[string]string{"s-03": "a=m1 e=1 learners=m4", "s-07": "a=m2 e=1 learners=m4", "s-11": "a=m3 e=1"},
		},
		{
			name: "stateless: revoke now, the new owner only after the release",
			in: Input{Config: config("", ids("l", 3)), Now: t0, Members: members("m1", "m2", "m3"),
				Current: placed(2, "l-00=m1", "l-01=m1", "l-02=m2")},
			want:     map[string]string{"l-01": "a=m1 e=1 revoke=m3/balance"},
			deadline: at(10),
		},
		{
			name: "stateless: released, the target takes over",
			in: Input{Config: config("", ids("l", 3)), Now: at(1), Members: released(members("m1", "m2", "m3"), "m1", "l-01", 1, 0),
				Current: with(placed(3, "l-00=m1", "l-01=m1", "l-02=m2"), func(a *Assignment) {
					a.Tasks["l-01"].Revoke = &Revoke{Target: "m3", Since: t0, Reason: reasonBalance}
				})},
			want: map[string]string{"l-01": "a=m3 e=2"},
		},
		{
			name: "leaving: stateful tasks get learners, stateless ones are revoked",
			in:   Input{Config: leaveCfg, Now: t0, Members: leaving3, Current: leaveState},
			moves: []string{
				"l-0 revoke m3>m1 leave",
				"s-04 learner-add m3>m1 leave",
				"s-05 learner-add m3>m2 leave",
			},
			deadline: at(10),
		},
		{
			name: "leaving: a member that owns nothing may shut down",
			in: Input{Config: leaveCfg, Now: at(60), Members: leaving3,
				Current: placed(9, "s-00=m1", "s-01=m1", "s-02=m2", "s-03=m2", "s-04=m1", "s-05=m2", "l-0=m1")},
			shutdown: []string{"m3"},
		},
		{
			name: "leaving: after the leave timeout, tasks move even if not caught up",
			in: Input{Config: leaveCfg, Now: at(300), Members: leaving3, Lags: lags("s-04/m1=9999"),
				Current: with(leaveState, func(a *Assignment) {
					a.Leaving = map[string]time.Time{"m3": t0}
					a.Tasks["s-04"].Learners = learner("m1", t0)
					a.Tasks["s-05"].Learners = learner("m2", t0)
					a.Tasks["l-0"].Active = "m1"
				})},
			moves: []string{"s-04 revoke m3>m1 leave-timeout", "s-05 revoke m3>m2 leave-timeout"},
		},
		{
			name: "leaving: when every member leaves, the tasks are retired (revoked to nobody)",
			in: Input{Config: config(ids("s", 2), ""), Now: t0,
				Members: []Member{{ID: "m1", Leaving: true}, {ID: "m2", Leaving: true}},
				Current: placed(4, "s-00=m1", "s-01=m2")},
			want:  map[string]string{"s-00": "a=m1 e=1 revoke=/no-eligible-member", "s-01": "a=m2 e=1 revoke=/no-eligible-member"},
			moves: []string{"s-00 revoke m1> no-eligible-member", "s-01 revoke m2> no-eligible-member"},
		},
		{
			name: "leaving: a retired task is dropped once released, and its owner may shut down",
			in: Input{Config: config(ids("s", 1), ""), Now: t0,
				Members: []Member{{ID: "m1", Leaving: true, Released: map[string]Release{"s-00": {Epoch: 1, Seq: 9, At: t0}}}},
				Current: with(placed(4, "s-00=m1"), func(a *Assignment) {
					a.Tasks["s-00"].Revoke = &Revoke{Target: "", Since: t0, Reason: reasonNoMember}
				})},
			want:     map[string]string{"s-00": "a= e=1"},
			moves:    []string{"s-00 unassign m1> no-eligible-member"},
			shutdown: []string{"m1"},
		},
		{
			name: "a retirement is withdrawn when a member joins",
			in: Input{Config: config(ids("s", 1), ""), Now: t0,
				Members: []Member{{ID: "m1", Leaving: true}, {ID: "m2"}},
				Current: with(placed(4, "s-00=m1"), func(a *Assignment) {
					a.Tasks["s-00"].Revoke = &Revoke{Target: "", Since: t0, Reason: reasonNoMember}
				})},
			want: map[string]string{"s-00": "a=m1 e=1 learners=m2"},
		},
		{
			name: "failover: the least lagged standby takes over",
			in: Input{Config: config(ids("s", 6), "l-0", func(c *Config) { c.Standbys = 2 }), Now: t0, Members: members("m1", "m2"), Current: dead3,
				Lags: lags("s-04/m1=10", "s-04/m2=3")},
			want: map[string]string{"s-04": "a=m2 e=2 standbys=m1", "l-0": "a=m1 e=2"},
		},
		{
			name: "failover: else a learner, else the furthest local copy",
			in: Input{Config: leaveCfg, Now: t0,
				Members: []Member{{ID: "m1"}, {ID: "m2", Positions: map[string]uint64{"s-05": 7}}},
				Current: with(leaveState, func(a *Assignment) { a.Tasks["s-04"].Learners = learner("m1", t0) })},
			want: map[string]string{"s-04": "a=m1 e=2", "s-05": "a=m2 e=2"},
		},
		{
			name: "failover: the furthest local copy wins, whatever the member's ID",
			in: Input{Config: config(ids("s", 2), ""), Now: t0,
				Members: []Member{{ID: "m1", Positions: map[string]uint64{"s-01": 5}}, {ID: "m2", Positions: map[string]uint64{"s-01": 9}}},
				Current: placed(2, "s-00=m1", "s-01=m3")},
			want: map[string]string{"s-01": "a=m2 e=2"},
		},
		{
			name: "a new learner is not promoted in the plan that adds it, whatever lag is on record",
			in: Input{Config: config(ids("s", 12), ""), Now: t0, Members: four, Current: newcomer,
				Lags: lags("s-03/m4=0", "s-07/m4=0", "s-11/m4=0")},
			want: map[string]string{"s-03": "a=m1 e=1 learners=m4", "s-07": "a=m2 e=1 learners=m4", "s-11": "a=m3 e=1 learners=m4"},
		},
		{
			name: "a returning member gets back the task its copy is freshest for, not stale copies",
			in: Input{Config: config(ids("s", 4), ""), Now: t0,
				Members: []Member{
					{ID: "m1", Positions: map[string]uint64{"s-00": 100, "s-01": 100, "s-02": 100, "s-03": 100}},
					{ID: "m2", Positions: map[string]uint64{"s-00": 99, "s-01": 3, "s-02": 2, "s-03": 1}},
				},
				Current: placed(4, "s-00=m1", "s-01=m1", "s-02=m1", "s-03=m1")},
			want: map[string]string{"s-00": "a=m1 e=1 learners=m2", "s-01": "a=m1 e=1", "s-02": "a=m1 e=1", "s-03": "a=m1 e=1 learners=m2"},
		},
		{
			name: "cold mode moves stateful tasks at once, with no learner",
			in:   Input{Config: config(ids("s", 12), "", func(c *Config) { c.Handover = Cold }), Now: t0, Members: four, Current: newcomer},
			want: map[string]string{"s-03": "a=m1 e=1 revoke=m4/balance", "s-07": "a=m2 e=1 revoke=m4/balance", "s-11": "a=m3 e=1 revoke=m4/balance"},
		},
		{
			name: "failover: without warm copies, the least loaded member",
			in: Input{Config: config(ids("s", 4), ""), Now: t0, Members: members("m1", "m2"),
				Current: placed(2, "s-00=m1", "s-01=m1", "s-02=m2", "s-03=m3")},
			want: map[string]string{"s-03": "a=m2 e=2"},
		},
		{
			name:  "no live member: tasks wait unassigned, epoch kept",
			in:    Input{Config: config(ids("s", 2), ""), Now: t0, Current: placed(2, "s-00=m1", "s-01=m2")},
			want:  map[string]string{"s-00": "a= e=1", "s-01": "a= e=1"},
			moves: []string{"s-00 unassign m1> no-eligible-member", "s-01 unassign m2> no-eligible-member"},
		},
		{
			name: "a revoke whose target died is cancelled",
			in:   Input{Config: config(ids("s", 12), ""), Now: at(1), Members: members("m1", "m2", "m3"), Current: revoking},
			want: map[string]string{"s-03": "a=m1 e=1"},
			moves: []string{
				"s-03 learner-drop >m4 member-dead", "s-03 revoke-cancel m1>m4 target-dead",
				"s-07 learner-drop >m4 member-dead", "s-11 learner-drop >m4 member-dead",
			},
		},
		{
			name: "a cancelled revoke that was released is granted again with a new epoch",
			in:   Input{Config: config(ids("s", 12), ""), Now: at(5), Members: released(members("m1", "m2", "m3"), "m1", "s-03", 1, 42), Current: revoking},
			want: map[string]string{"s-03": "a=m1 e=2 seq=42"},
		},
		{
			name: "standbys prefer a zone the owner does not use",
			in: Input{Config: config(ids("s", 2), "", oneStandby), Now: t0, Members: zones,
				Current: placed(2, "s-00=m1", "s-01=m2")},
			want: map[string]string{"s-00": "a=m1 e=1 standbys=m3", "s-01": "a=m2 e=1 standbys=m3"},
		},
		{
			name: "the owner a task was promoted away from becomes its standby",
			in: Input{Config: config(ids("s", 2), "", oneStandby), Now: at(5),
				Members: released(members("m1", "m2", "m3"), "m1", "s-00", 1, 9),
				Current: with(placed(4, "s-00=m1", "s-01=m3"), func(a *Assignment) {
					a.Tasks["s-00"].Learners = learner("m2", t0)
					a.Tasks["s-00"].Revoke = &Revoke{Target: "m2", Since: at(1), Reason: reasonBalance}
					a.Tasks["s-01"].Standbys = []string{"m1"}
				})},
			want: map[string]string{"s-00": "a=m2 e=2 standbys=m1 seq=9"},
		},
		{
			name: "a caught-up standby is the target: no learner",
			in: Input{Config: config(ids("s", 2), "", oneStandby), Now: t0, Members: members("m1", "m2"),
				Lags: lags("s-01/m2=0"),
				Current: with(placed(4, "s-00=m1", "s-01=m1"), func(a *Assignment) {
					a.Tasks["s-00"].Standbys = []string{"m2"}
					a.Tasks["s-01"].Standbys = []string{"m2"}
				})},
			want:  map[string]string{"s-01": "a=m1 e=1 revoke=m2/balance standbys=m2"},
			moves: []string{"s-01 revoke m1>m2 balance"},
		},
		{
			name: "the tasks of leaving members get learner slots first",
			in: Input{Config: config(ids("s", 4), "", func(c *Config) { c.MaxLearners = 1 }), Now: t0,
				Members: []Member{{ID: "m1"}, {ID: "m2", Leaving: true}, {ID: "m3"}},
				Current: placed(2, "s-00=m1", "s-01=m1", "s-02=m1", "s-03=m2")},
			moves: []string{"s-03 learner-add m2>m3 leave"},
		},
		{
			name: "a restarted member gets back the tasks it has state for",
			in: Input{Config: config(ids("s", 6), ""), Now: t0,
				Members: []Member{{ID: "m1"}, {ID: "m2"}, {ID: "m3", Positions: map[string]uint64{"s-00": 500, "s-03": 400}}},
				Current: placed(2, "s-00=m1", "s-01=m1", "s-02=m1", "s-03=m2", "s-04=m2", "s-05=m2")},
			moves: []string{"s-00 learner-add m1>m3 balance", "s-03 learner-add m2>m3 balance"},
		},
		{
			name:   "capacity weighs the shares",
			in:     Input{Config: config(ids("s", 6), ""), Now: t0, Members: []Member{{ID: "m1", Capacity: 2}, {ID: "m2"}}},
			owners: "m1:4 m2:2",
		},
		{
			name:  "a task removed from the config leaves a tombstone with its epoch",
			in:    Input{Config: config(ids("s", 1), ""), Now: t0, Members: members("m1"), Current: placed(2, "s-00=m1", "gone=m1")},
			want:  map[string]string{"gone": "a= e=1"},
			moves: []string{"gone unassign m1> removed-from-config"},
		},
		{
			name: "a task added back continues its epoch",
			in: Input{Config: config(ids("s", 1), ""), Now: t0, Members: members("m1"),
				Current: with(placed(2), func(a *Assignment) { a.Tasks["s-00"] = &TaskAssignment{Epoch: 7} })},
			want: map[string]string{"s-00": "a=m1 e=8"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Plan(tt.in)
			checkSummaries(t, res, tt.want)
			if tt.moves != nil {
				if got := moveLines(res.Moves); !slices.Equal(got, tt.moves) {
					t.Errorf("Plan(in).Moves = %q, want %q", got, tt.moves)
				}
			}
			if tt.owners != "" {
				if got := counts(res.Assignment, nil); got != tt.owners {
					t.Errorf("Plan(in) owners = %s, want %s", got, tt.owners)
				}
			}
			if !slices.Equal(res.Shutdown, tt.shutdown) {
				t.Errorf("Plan(in).Shutdown = %v, want %v", res.Shutdown, tt.shutdown)
			}
			if !tt.deadline.IsZero() && !res.NextDeadline.Equal(tt.deadline) {
				t.Errorf("Plan(in).NextDeadline = %v, want %v", res.NextDeadline, tt.deadline)
			}
			if tt.same && (res.Changed || len(res.Moves) > 0) {
				t.Errorf("Plan(in) = changed %v %q, want no change", res.Changed, moveLines(res.Moves))
			}
			if !tt.same && !res.Changed {
				t.Errorf("Plan(in).Changed = false, want true")
			}
			checkPlan(t, tt.in, res)
		})
	}
}

// TestPlanWarmDestinationsFewestFirst: leaving m9's tasks go to m1 and m2,
// which have room for one each, warm where they can; planning the result
// again changes nothing.
//   - s-0 has standbys on m2 and on leaving m8, s-1 on m1: neither move
//     needs a learner. m8's drop costs s-0 zone c, and the plan wins it
//     back beside the copy on s-0's destination, on m1. Planned again, s-0
//     is warm on m1 and m2 and s-1 on m1 alone: s-1 chooses first and
//     keeps m1 (in task order, s-0 took m1 and s-1 went to m2 with a new
//     learner).
//   - s-0's standby on m2 has caught up, and s-1 is warm on m2 alone: s-0
//     takes m2 over at once, and s-1 goes to m1 through a learner (had s-1
//     chosen first, the copy the plan adds beside it on m1 would make both
//     warm on two members, and s-0, first in task order, would take m2 in
//     the next plan).
func TestPlanWarmDestinationsFewestFirst(t *testing.T) {
	group := []Member{{ID: "m1", Zone: "a"}, {ID: "m2", Zone: "b"}, {ID: "m8", Zone: "c", Leaving: true}, {ID: "m9", Zone: "d", Leaving: true}}
	for _, tc := range []struct {
		name, current string
		lags          map[string]map[string]uint64
		moves         []string
	}{{
		name: "the only warm member of a task",
		current: `{"generation":3,"leaving":{"m8":"2025-06-01T12:00:00Z","m9":"2025-06-01T12:00:00Z"},"tasks":{
			"s-0":{"active":"m9","epoch":1,"standbys":["m2","m8"]},
			"s-1":{"active":"m9","epoch":1,"standbys":["m1"]}}}`,
		moves: []string{"s-0 standby-drop >m8 member-leaving", "s-0 standby-add m9>m1 standbys"},
	}, {
		name: "a caught-up standby first",
		current: `{"generation":3,"leaving":{"m8":"2025-06-01T12:00:00Z","m9":"2025-06-01T12:00:00Z"},"tasks":{
			"s-0":{"active":"m9","epoch":1,"standbys":["m1","m2"]},
			"s-1":{"active":"m9","epoch":1,"standbys":["m2","m8"]}}}`,
		lags:  lags("s-0/m2=0"),
		moves: []string{"s-0 revoke m9>m2 leave", "s-1 standby-drop >m8 member-leaving", "s-1 learner-add m9>m1 leave"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Config: config("s-0..1", "", func(c *Config) { c.Standbys = 2 }), Now: t0, Members: group,
				Current: assignmentJSON(t, tc.current), Lags: tc.lags}
			res := Plan(in)
			checkPlan(t, in, res)
			if got := moveLines(res.Moves); !slices.Equal(got, tc.moves) {
				t.Fatalf("Plan(in).Moves = %q, want %q", got, tc.moves)
			}
			in.Current = res.Assignment
			if again := Plan(in); again.Changed {
				t.Fatalf("planning the result again: %q, want no change", moveLines(again.Moves))
			}
		})
	}
}

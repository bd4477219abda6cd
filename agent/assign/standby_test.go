package assign

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// standbyStep is one plan of a standby walk: the lags reported before it
// (every learner and standby caught up but those listed as task/member)
// and the moves it must make.
type standbyStep struct {
	name   string
	behind []string
	want   []string
}

// walkStandbys plans in step by step, each result fed back as the next
// current assignment, and checks each plan's moves and invariants.
func walkStandbys(t *testing.T, in Input, steps []standbyStep) Input {
	t.Helper()
	for _, st := range steps {
		in.Lags = caughtUpLags(in.Current)
		for _, b := range st.behind {
			for task, ms := range in.Lags {
				for m := range ms {
					if task+"/"+m == b {
						delete(ms, m)
					}
				}
			}
		}
		res := Plan(in)
		checkPlan(t, in, res)
		if got := moveLines(res.Moves); !slices.Equal(got, st.want) && !(len(got) == 0 && len(st.want) == 0) {
			t.Fatalf("%s: Plan(in).Moves = %q, want %q\nassignment: %s", st.name, got, st.want, js(in.Current))
		}
		in.Current = res.Assignment
		in.Now = in.Now.Add(time.Second)
	}
	return in
}

func assignmentJSON(t *testing.T, s string) Assignment {
	t.Helper()
	var a Assignment
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestPlanStandbyChain: m0 holds one stateful copy more than its share (2
// actives and 2 standbys against 3 copies each), m1 one fewer, and m0
// stands by only for tasks m1 owns. The target moves m0's copy of s-1 to
// m2 and m2's copy of s-0 on to m1, warm: both new copies first, each old
// one once its replacement has caught up.
func TestPlanStandbyChain(t *testing.T) {
	in := Input{Config: config("s-0..5", "", func(c *Config) { c.Standbys = 1 }), Now: t0, Members: members("m0", "m1", "m2", "m3"),
		Current: assignmentJSON(t, `{"generation":3,"tasks":{
			"s-0":{"active":"m0","epoch":1,"standbys":["m2"]},"s-1":{"active":"m1","epoch":1,"standbys":["m0"]},
			"s-2":{"active":"m2","epoch":1,"standbys":["m3"]},"s-3":{"active":"m3","epoch":1,"standbys":["m2"]},
			"s-4":{"active":"m0","epoch":1,"standbys":["m3"]},"s-5":{"active":"m1","epoch":1,"standbys":["m0"]}}}`)}
	in = walkStandbys(t, in, []standbyStep{
		{"both copies of the chain are built", nil, []string{"s-0 standby-add m0>m1 balance", "s-1 standby-add m1>m2 balance"}},
		{"s-1's new copy is behind", []string{"s-1/m2"}, []string{"s-0 standby-drop m0>m2 balance"}},
		{"it caught up", nil, []string{"s-1 standby-drop m1>m0 balance"}},
		{"balanced", nil, nil},
	})
	copies := map[string]int{}
	for _, ta := range in.Current.Tasks {
		for _, m := range copiesOf(ta) {
			copies[m]++
		}
	}
	for m, n := range copies {
		if n != 3 {
			t.Errorf("%s holds %d stateful copies, want 3 each: %v", m, n, copies)
		}
	}
}

// TestPlanStandbySpreadsZones: a standby in its owner's zone moves warm to
// the member of the zone no copy uses; the move is recorded so that it
// survives a change of leader, and ends once the new copy has caught up.
func TestPlanStandbySpreadsZones(t *testing.T) {
	in := Input{Config: config("s-0", "", func(c *Config) { c.Standbys = 1 }), Now: t0,
		Members: []Member{{ID: "m1", Zone: "a"}, {ID: "m2", Zone: "a"}, {ID: "m3", Zone: "b"}},
		Current: assignmentJSON(t, `{"generation":3,"tasks":{"s-0":{"active":"m1","epoch":1,"standbys":["m2"]}}}`)}
	in = walkStandbys(t, in, []standbyStep{{"the new copy goes to zone b", nil, []string{"s-0 standby-add m1>m3 zones"}}})
	if got, want := summary(in.Current.Tasks["s-0"]), "a=m1 e=1 standbys=m2,m3"; got != want || !sameJSON(in.Current.Tasks["s-0"].StandbyMove, &StandbyMove{From: "m2", To: "m3"}) {
		t.Fatalf("s-0 = %s, move %s; want %s, move m2 -> m3", got, js(in.Current.Tasks["s-0"].StandbyMove), want)
	}
	// A new leader reads the assignment back from its stored JSON.
	in.Current = assignmentJSON(t, js(in.Current))
	walkStandbys(t, in, []standbyStep{
		{"m3 has not caught up", []string{"s-0/m3"}, nil},
		{"m3 caught up: m2's copy goes", nil, []string{"s-0 standby-drop m1>m2 balance"}},
		{"spread", nil, nil},
	})
}

// TestPlanStandbyJoinInNewZone: with two standbys and members in two
// zones, every task has two copies in one zone; a member joining in a third
// zone gets a copy of each, moved warm, at most maxLearnersPerMember being
// built on it at a time.
func TestPlanStandbyJoinInNewZone(t *testing.T) {
	cfg := config("s-0..3", "", func(c *Config) { c.Standbys = 2; c.MaxLearnersPerMember = 2 })
	in := Input{Config: cfg, Now: t0, Members: []Member{{ID: "m1", Zone: "a"}, {ID: "m2", Zone: "a"}, {ID: "m3", Zone: "b"}, {ID: "m4", Zone: "b"}}}
	in.Current = settle(t, in)
	in.Members = append(in.Members, Member{ID: "m5", Zone: "c"})
	in.Lags = caughtUpLags(in.Current)
	res := Plan(in)
	checkPlan(t, in, res)
	added := 0
	for _, m := range res.Moves {
		if m.Kind == MoveStandbyAdd && m.To == "m5" && m.Reason == reasonZones {
			added++
		}
	}
	if added != 2 {
		t.Fatalf("Plan(in).Moves = %q, want two standby moves to m5 for zones", moveLines(res.Moves))
	}
	run := Simulate(in, time.Second, 50, func(in Input, res Result) { checkPlan(t, in, res) })
	if !run.Converged {
		t.Fatalf("no convergence after m5 joined")
	}
	if bad := checkZoneSpan(in.Members, cfg, run.Final.Assignment); len(bad) > 0 {
		t.Fatalf("converged with %v", bad)
	}
}

// TestPlanStandbyPromotionKeepsZones: s-0 is promoted to m3, in the zone
// of its standby m2; the same plan keeps a copy in zone a, on m1, the owner
// it was promoted away from, although m1 is at its learner bound (it warms
// s-2).
func TestPlanStandbyPromotionKeepsZones(t *testing.T) {
	in := Input{Config: config("s-0..2", "", func(c *Config) { c.Standbys = 1; c.MaxLearnersPerMember = 1 }), Now: at(5),
		Members: []Member{{ID: "m1", Zone: "a", Released: map[string]Release{"s-0": {Epoch: 1, Seq: 9, At: at(4)}}},
			{ID: "m2", Zone: "b"}, {ID: "m3", Zone: "b"}, {ID: "m4", Zone: "a"}},
		Current: assignmentJSON(t, `{"generation":4,"tasks":{
			"s-0":{"active":"m1","epoch":1,"revoke":{"target":"m3","since":"2025-06-01T12:00:01Z","reason":"balance"},
			       "learners":[{"member":"m3","since":"2025-06-01T12:00:00Z"}],"standbys":["m2"]},
			"s-1":{"active":"m4","epoch":1,"standbys":["m2"]},
			"s-2":{"active":"m4","epoch":1,"learners":[{"member":"m1","since":"2025-06-01T12:00:00Z"}],"standbys":["m3"]}}}`),
		Lags: lags("s-0/m3=0", "s-0/m2=0", "s-1/m2=0", "s-2/m3=0")}
	res := Plan(in)
	checkPlan(t, in, res)
	checkSummaries(t, res, map[string]string{"s-0": "a=m3 e=2 standbys=m1,m2 seq=9", "s-2": "a=m4 e=1 learners=m1 standbys=m3"})
	if mv := res.Assignment.Tasks["s-0"].StandbyMove; mv == nil || *mv != (StandbyMove{From: "m2", To: "m1"}) {
		t.Errorf("s-0's standby move = %s, want m2 -> m1", js(mv))
	}
}

// TestPlanStandbyMoveOfAnOlderLeader: a leader that predates
// TaskAssignment.StandbyMove left one standby more than configured while
// a copy moved; the copy the target does not want is dropped once the
// others have caught up.
func TestPlanStandbyMoveOfAnOlderLeader(t *testing.T) {
	in := Input{Config: config("s-0", "", func(c *Config) { c.Standbys = 1 }), Now: t0,
		Members: []Member{{ID: "m1", Zone: "a"}, {ID: "m2", Zone: "a"}, {ID: "m3", Zone: "b"}},
		Current: assignmentJSON(t, `{"generation":3,"tasks":{"s-0":{"active":"m1","epoch":1,"standbys":["m2","m3"]}}}`)}
	walkStandbys(t, in, []standbyStep{
		{"m3 has not caught up", []string{"s-0/m3"}, nil},
		{"m3 caught up: m2's copy goes", nil, []string{"s-0 standby-drop m1>m2 too-many"}},
	})
}

// TestPlanStandbyZoneLostDuringMove: s-0's standby moves from m3 to m4
// (zone b to zone c), m4 not caught up yet, when the plan costs s-0 zone a.
//   - Its owner's worker is lost and its standbys' workers are detached, so
//     it fails over to m5, in zone b: the same plan wins zone a back on m1,
//     the owner it failed over from, dropping m3, whose zone other copies
//     use, at once to make room (one move per task: m2's copy now goes
//     once m1 has caught up).
//   - Its leaving owner hands it over to m5, in zone b, and no other member
//     is in zone a: the move goes on, though the target trades m2's copy
//     for one on m6 (axis 4); with no zone to win back, nothing is worth
//     cutting it short.
func TestPlanStandbyZoneLostDuringMove(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      Input
		moves   []string
		s0      string
		standby StandbyMove
	}{{
		name: "won back on the owner it failed over from",
		in: Input{Config: config("s-0", "", func(c *Config) { c.Standbys = 2 }), Now: t0,
			Members: []Member{{ID: "m1", Zone: "a", Worker: WorkerLost}, {ID: "m2", Zone: "b", Worker: WorkerDetached},
				{ID: "m3", Zone: "b", Worker: WorkerDetached}, {ID: "m4", Zone: "c", Worker: WorkerDetached}, {ID: "m5", Zone: "b"}},
			Current: assignmentJSON(t, `{"generation":3,"tasks":{
				"s-0":{"active":"m1","epoch":1,"standbys":["m2","m3","m4"],"standbyMove":{"from":"m3","to":"m4"}}}}`),
			Lags: lags("s-0/m2=0", "s-0/m3=0")},
		moves:   []string{"s-0 failover m1>m5 worker-lost", "s-0 standby-drop m5>m3 too-many", "s-0 standby-add m5>m1 zones"},
		s0:      "a=m5 e=2 standbys=m1,m2,m4",
		standby: StandbyMove{From: "m2", To: "m1"},
	}, {
		name: "nobody to win it back",
		in: Input{Config: config("s-0..2", "", func(c *Config) { c.Standbys = 2 }), Now: at(2),
			Members: []Member{{ID: "m1", Zone: "a", Leaving: true, Released: map[string]Release{"s-0": {Epoch: 1, Seq: 9, At: at(1)}}},
				{ID: "m2", Zone: "b"}, {ID: "m3", Zone: "b"}, {ID: "m4", Zone: "c"}, {ID: "m5", Zone: "b"}, {ID: "m6", Zone: "b"}},
			Current: assignmentJSON(t, `{"generation":3,"leaving":{"m1":"2025-06-01T12:00:00Z"},"tasks":{
				"s-0":{"active":"m1","epoch":1,"revoke":{"target":"m5","since":"2025-06-01T12:00:01Z","reason":"leave"},
				       "learners":[{"member":"m5","since":"2025-06-01T12:00:00Z"}],"standbys":["m2","m3","m4"],"standbyMove":{"from":"m3","to":"m4"}},
				"s-1":{"active":"m2","epoch":1,"standbys":["m3","m4"]},
				"s-2":{"active":"m4","epoch":1,"standbys":["m2","m3"]}}}`),
			Lags: lags("s-0/m2=0", "s-0/m3=0", "s-0/m5=0", "s-1/m3=0", "s-1/m4=0", "s-2/m2=0", "s-2/m3=0")},
		moves:   []string{"s-0 promote m1>m5 released"},
		s0:      "a=m5 e=2 standbys=m2,m3,m4 seq=9",
		standby: StandbyMove{From: "m3", To: "m4"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			res := Plan(tc.in)
			checkPlan(t, tc.in, res)
			if got := moveLines(res.Moves); !slices.Equal(got, tc.moves) {
				t.Errorf("Plan(in).Moves = %q, want %q", got, tc.moves)
			}
			checkSummaries(t, res, map[string]string{"s-0": tc.s0})
			if mv := res.Assignment.Tasks["s-0"].StandbyMove; mv == nil || *mv != tc.standby {
				t.Errorf("s-0's standby move = %s, want %s -> %s", js(mv), tc.standby.From, tc.standby.To)
			}
		})
	}
}

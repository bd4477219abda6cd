package assign

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleInput has one of every field set.
func sampleInput() Input {
	return Input{
		Config: config(ids("s", 3), "l-0", func(c *Config) { c.Handover = Stable; c.Standbys = 1 }),
		Now:    at(30),
		Members: []Member{
			{ID: "m1", Capacity: 2, Zone: "a", Positions: map[string]uint64{"s-00": 10}},
			{ID: "m2", Zone: "b", Leaving: true, Released: map[string]Release{"s-01": {Epoch: 3, Seq: 99, At: at(20)}}},
		},
		Current: Assignment{
			Generation: 7,
			Tasks: map[string]*TaskAssignment{
				"s-00": {Active: "m1", Epoch: 2, HandoffSeq: 5, HandoffAt: at(1), Standbys: []string{"m2"}},
				"s-01": {Active: "m2", Epoch: 3, Revoke: &Revoke{Target: "m1", Since: at(10), Reason: reasonLeave},
					Learners: []Learner{{Member: "m1", Since: at(2)}}},
			},
			Leaving: map[string]time.Time{"m2": at(0)},
			Round:   &Round{ID: 6, Started: at(2), Tasks: []string{"s-01"}},
		},
		Lags: lags("s-01/m1=4"),
	}
}

func TestInputJSONRoundTrip(t *testing.T) {
	in := sampleInput()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var back Input
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("json.Unmarshal(%s) = %v", b, err)
	}
	again, _ := json.Marshal(back)
	if !bytes.Equal(b, again) {
		t.Errorf("round trip = %s, want %s", again, b)
	}
	if !back.Current.Equal(in.Current) {
		t.Errorf("round trip of the assignment is not Equal:\n%s\n%s", js(back.Current), js(in.Current))
	}
	// Plan reads the decoded input exactly like the original.
	if got, want := mustJSON(Plan(back)), mustJSON(Plan(in)); !bytes.Equal(got, want) {
		t.Errorf("Plan(decoded) = %s, want %s", got, want)
	}
	for _, field := range []string{`"releaseTimeout":"10s"`, `"handover":"stable"`, `"since":"2025-06-01T12:00:10Z"`} {
		if !strings.Contains(string(b), field) {
			t.Errorf("json.Marshal(in) = %s, want it to contain %s", b, field)
		}
	}
}

func TestResultJSONRoundTrip(t *testing.T) {
	res := Plan(sampleInput())
	b := mustJSON(res)
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if again := mustJSON(back); !bytes.Equal(b, again) {
		t.Errorf("round trip = %s, want %s", again, b)
	}
}

func TestCloneSharesNothing(t *testing.T) {
	a := sampleInput().Current
	c := a.Clone()
	if !c.Equal(a) {
		t.Fatalf("Clone() = %s, want %s", js(c), js(a))
	}
	c.Tasks["s-00"].Standbys[0] = "x"
	c.Tasks["s-01"].Learners[0].Member = "x"
	c.Tasks["s-01"].Revoke.Target = "x"
	c.Leaving["x"] = t0
	c.Round.Tasks[0] = "x"
	orig := sampleInput().Current
	if !a.Equal(orig) {
		t.Errorf("editing the clone changed the original: %s", js(a))
	}
}

func TestPlanDoesNotModifyInput(t *testing.T) {
	in := sampleInput()
	before := js(in)
	res := Plan(in)
	if after := js(in); after != before {
		t.Errorf("Plan modified its input:\n%s\n%s", before, after)
	}
	// Nor does the result share memory with it.
	for _, ta := range res.Assignment.Tasks {
		for i := range ta.Learners {
			ta.Learners[i].Member = "x"
		}
		for i := range ta.Standbys {
			ta.Standbys[i] = "x"
		}
		if ta.Revoke != nil {
			ta.Revoke.Target = "x"
		}
		ta.Active = "x"
	}
	for m := range res.Assignment.Leaving {
		res.Assignment.Leaving[m] = time.Time{}
	}
	if res.Assignment.Round != nil {
		for i := range res.Assignment.Round.Tasks {
			res.Assignment.Round.Tasks[i] = "x"
		}
	}
	if after := js(in); after != before {
		t.Errorf("editing Plan's result modified its input:\n%s\n%s", before, after)
	}
}

func TestRoles(t *testing.T) {
	a := sampleInput().Current
	tests := []struct {
		member                    string
		active, learning, standby []string
		revoking                  []string
		owns                      bool
	}{
		{"m1", []string{"s-00"}, []string{"s-01"}, nil, nil, true},
		{"m2", []string{"s-01"}, nil, []string{"s-00"}, []string{"s-01"}, true},
		{"m3", nil, nil, nil, nil, false},
	}
	for _, tt := range tests {
		act, learn, stand := a.Roles(tt.member)
		if !slices.Equal(act, tt.active) || !slices.Equal(learn, tt.learning) || !slices.Equal(stand, tt.standby) {
			t.Errorf("Roles(%s) = %v %v %v, want %v %v %v", tt.member, act, learn, stand, tt.active, tt.learning, tt.standby)
		}
		if got := a.Revoking(tt.member); !slices.Equal(got, tt.revoking) {
			t.Errorf("Revoking(%s) = %v, want %v", tt.member, got, tt.revoking)
		}
		if got := a.Owns(tt.member); got != tt.owns {
			t.Errorf("Owns(%s) = %v, want %v", tt.member, got, tt.owns)
		}
	}
}

func TestEqualIgnoresOrder(t *testing.T) {
	a := Assignment{Tasks: map[string]*TaskAssignment{"s": {Active: "m1", Standbys: []string{"m2", "m3"},
		Learners: []Learner{{Member: "m4", Since: t0}, {Member: "m5", Since: t0}}}}}
	b := Assignment{Tasks: map[string]*TaskAssignment{"s": {Active: "m1", Standbys: []string{"m3", "m2"},
		Learners: []Learner{{Member: "m5", Since: t0.In(time.FixedZone("x", 3600))}, {Member: "m4", Since: t0}}}}}
	if !a.Equal(b) {
		t.Errorf("Equal(%s, %s) = false, want true", js(a), js(b))
	}
	b.Tasks["s"].Epoch = 1
	if a.Equal(b) {
		t.Errorf("Equal with different epochs = true, want false")
	}
}

func TestInputValidate(t *testing.T) {
	if err := sampleInput().Validate(); err != nil {
		t.Errorf("Validate(sample) = %v, want nil", err)
	}
	bad := sampleInput()
	bad.Now = time.Time{}
	bad.Config.Handover = "fast"
	bad.Members = append(bad.Members, Member{ID: "m1"}, Member{})
	bad.Current.Tasks["s-02"] = nil
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate(bad) = nil, want errors")
	}
	for _, want := range []string{"config: handover mode", "now: missing", `members[2]: id "m1" is also members[0]`, "members[3]: id is empty", `current.tasks["s-02"]: null`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(bad) = %v, want it to mention %q", err, want)
		}
	}
}

func TestPlanWithBadTaskSpecsChangesNothing(t *testing.T) {
	in := sampleInput()
	in.Config.Stateful = []string{"bad id!"}
	res := Plan(in)
	if res.Changed || !res.Assignment.Equal(in.Current) {
		t.Errorf("Plan(bad specs) = %s, want the current assignment unchanged", js(res))
	}
}

package assign

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// stuckGroup is four members, m02 one copy above its share, none of whose
// standbys can move straight to m03, the member below its share.
func stuckGroup(t *testing.T) Input {
	t.Helper()
	cfg := config("s-0..8", "l-0..1", func(c *Config) { c.Standbys = 1 })
	var current Assignment
	if err := json.Unmarshal([]byte(`{"generation":7,"tasks":{
		"l-0":{"active":"m00","epoch":1},"l-1":{"active":"m01","epoch":1},
		"s-0":{"active":"m00","epoch":1,"standbys":["m01"]},"s-1":{"active":"m00","epoch":1,"standbys":["m03"]},
		"s-2":{"active":"m01","epoch":1,"standbys":["m00"]},"s-3":{"active":"m03","epoch":2,"standbys":["m02"]},
		"s-4":{"active":"m01","epoch":1,"standbys":["m00"]},"s-5":{"active":"m02","epoch":2,"standbys":["m01"]},
		"s-6":{"active":"m03","epoch":2,"standbys":["m02"]},"s-7":{"active":"m02","epoch":2,"standbys":["m01"]},
		"s-8":{"active":"m02","epoch":2,"standbys":["m00"]}}}`), &current); err != nil {
		t.Fatal(err)
	}
	return Input{Config: cfg, Now: t0, Members: members("m00", "m01", "m02", "m03"), Current: current}
}

// TestPlanShedsThroughMiddle: m02 holds one copy more than its share (its
// 3 actives and 2 standbys against 4.5 copies each), and its standbys are
// of the two tasks m03, the member below its share, owns, so neither can
// move there. The copy of s-6 moves, warm, to m00, which passes its copy
// of s-8 on to m03; nothing is dropped before the copy replacing it has
// caught up, and the group ends balanced and stays so.
func TestPlanShedsThroughMiddle(t *testing.T) {
	in := stuckGroup(t)
	// caughtUp reports every copy caught up but those named task/member.
	caughtUp := func(a Assignment, behind ...string) map[string]map[string]uint64 {
		l := caughtUpLags(a)
		for task, ms := range l {
			for m := range ms {
				if slices.Contains(behind, task+"/"+m) {
					delete(ms, m)
				}
			}
		}
		return l
	}
	steps := []struct {
		name   string
		behind []string
		want   []string
	}{
		{"m02's copy of s-6 moves to m00", nil, []string{"s-6 standby-add m03>m00 balance"}},
		{"m00's new copy is not caught up yet", []string{"s-6/m00"}, nil},
		{"m02's copy goes, m00 passes s-8 on", nil, []string{"s-6 standby-drop m03>m02 balance", "s-8 standby-add m02>m03 balance"}},
		{"m03's new copy is not caught up yet", []string{"s-8/m03"}, nil},
		{"m00's copy of s-8 goes", nil, []string{"s-8 standby-drop m02>m00 balance"}},
		{"balanced", nil, nil},
	}
	for _, st := range steps {
		in.Lags = caughtUp(in.Current, st.behind...)
		res := Plan(in)
		checkPlan(t, in, res)
		if got := moveLines(res.Moves); !slices.Equal(got, st.want) {
			t.Fatalf("%s: Plan(in).Moves = %q, want %q\nassignment: %s", st.name, got, st.want, js(in.Current))
		}
		in.Current = res.Assignment
		in.Now = in.Now.Add(time.Second)
	}
	copies := map[string]int{}
	for id, ta := range in.Current.Tasks {
		if id[0] == 's' {
			copies[ta.Active]++
			for _, s := range ta.Standbys {
				copies[s]++
			}
		}
	}
	for m, n := range copies {
		if n < 4 || n > 5 {
			t.Errorf("%s holds %d stateful copies, share 4.5: %v", m, n, copies)
		}
	}
}

// TestPlanShedsThroughMiddleKeepsZones: the same group in two zones. m00
// would be the first middle member, but s-6's copy would leave zone b,
// which no other copy of it uses, for zone a, where its owner is; m01, in
// zone b, takes it instead.
func TestPlanShedsThroughMiddleKeepsZones(t *testing.T) {
	in := stuckGroup(t)
	zones := map[string]string{"m00": "a", "m01": "b", "m02": "b", "m03": "a"}
	for i := range in.Members {
		in.Members[i].Zone = zones[in.Members[i].ID]
	}
	in.Lags = caughtUpLags(in.Current)
	res := Plan(in)
	checkPlan(t, in, res)
	if got, want := moveLines(res.Moves), []string{"s-6 standby-add m03>m01 balance"}; !slices.Equal(got, want) {
		t.Fatalf("Plan(in).Moves = %q, want %q", got, want)
	}
}

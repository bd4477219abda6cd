package assign

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// TestPlanShedsThroughMiddle: m02 holds one copy more than its share (its
// 3 actives and 2 standbys against 4.5 copies each), and its standbys are
// of the two tasks m03, the member below its share, owns, so neither can
// move there. The copy of s-6 moves, warm, to m00, which passes its copy
// of s-8 on to m03; nothing is dropped before the copy replacing it has
// caught up, and the group ends balanced and stays so.
func TestPlanShedsThroughMiddle(t *testing.T) {
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
	in := Input{Config: cfg, Now: t0, Members: members("m00", "m01", "m02", "m03"), Current: current}
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

package group

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
)

// TestPublicationScales checks that a 10,000-task group's generation fits
// NATS's default 1 MB message limit however its tasks are spread, and that
// a member's assignment holds only what concerns it.
func TestPublicationScales(t *testing.T) {
	const tasks, maxPayload = 10_000, 1 << 20
	for _, members := range []int{1, 10, 1000} {
		t.Run(fmt.Sprintf("members=%d", members), func(t *testing.T) {
			cfg := assign.DefaultConfig()
			cfg.Stateful = []string{fmt.Sprintf("orders-0..%d", tasks-1)}
			cfg.Standbys = 1
			in := assign.Input{Config: cfg, Now: time.Unix(0, 0).UTC(), Current: assign.Assignment{Tasks: map[string]*assign.TaskAssignment{}}}
			for i := 0; i < members; i++ {
				in.Members = append(in.Members, assign.Member{ID: fmt.Sprintf("member-%04d", i)})
			}
			res := assign.Plan(in)
			// A second plan places the standbys.
			in.Current = res.Assignment
			res = assign.Plan(in)
			live := make([]string, len(in.Members))
			for i, m := range in.Members {
				live[i] = m.ID
			}
			parts, unassigned := Split(res.Assignment, live, res.Shutdown)
			largest := 0
			revs := map[string]uint64{}
			for id, e := range parts {
				b, err := json.Marshal(e)
				if err != nil {
					t.Fatal(err)
				}
				largest = max(largest, len(b))
				revs[id] = uint64(len(revs) + 1)
				n := len(e.Tasks) + len(e.Learning) + len(e.Standby)
				if members > 1 && n > 3*tasks/members {
					t.Errorf("assignment of %s holds %d task roles, want about %d", id, n, 2*tasks/members)
				}
			}
			g, err := json.Marshal(GenerationRecord{Generation: res.Assignment.Generation, Assignments: revs, Unassigned: unassigned})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("largest member assignment %d bytes, generation record %d bytes", largest, len(g))
			if largest >= maxPayload || len(g) >= maxPayload {
				t.Errorf("largest member assignment %d bytes, generation record %d bytes; want both under %d", largest, len(g), maxPayload)
			}
			// Merging the parts back gives the assignment.
			decoded := map[string]MemberAssignment{}
			for id, e := range parts {
				decoded[id] = *e
			}
			back := Merge(GenerationRecord{Generation: res.Assignment.Generation, Unassigned: unassigned}, decoded)
			if !back.Equal(res.Assignment) {
				t.Errorf("merge(split(a)) != a")
			}
		})
	}
}

// TestIncoming: a member is named for the tasks a direct revoke hands over
// to it, and for no revoke through the leader or to nobody.
func TestIncoming(t *testing.T) {
	as := assign.Assignment{Tasks: map[string]*assign.TaskAssignment{
		"t1": {Active: "m1", Epoch: 3, Revoke: &assign.Revoke{Target: "m3", Epoch: 4}},
		"t2": {Active: "m2", Epoch: 1, Revoke: &assign.Revoke{Target: "m3", Epoch: 2}},
		"t3": {Active: "m1", Epoch: 1, Revoke: &assign.Revoke{Target: "m2"}},         // through the leader
		"t4": {Active: "m2", Epoch: 5, Revoke: &assign.Revoke{Target: "", Epoch: 0}}, // to nobody
		"t5": {Active: "m1", Epoch: 1},
	}}
	got, want := Incoming(as), map[string][]string{"m3": {"t1", "t2"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Incoming = %v, want %v", got, want)
	}
	if got := Incoming(assign.Assignment{Tasks: map[string]*assign.TaskAssignment{"t5": as.Tasks["t5"]}}); got != nil {
		t.Errorf("Incoming with no direct revoke = %v, want nil", got)
	}
}

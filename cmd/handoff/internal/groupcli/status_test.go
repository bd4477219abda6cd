package groupcli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
)

// TestStatusShowsWorkers: 'handoff status' shows each member's worker
// state, with how long a detached or lost worker has been gone.
func TestStatusShowsWorkers(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	gone := now.Add(-12 * time.Second)
	gv := api.GroupView{Group: "g", Generation: 3, Leader: "m1", Members: []api.MemberView{
		{ID: "m1", State: api.StateMember, Worker: api.WorkerAttached, Active: []string{"t-0"}},
		{ID: "m2", State: api.StateMember, Worker: api.WorkerDetached, WorkerSince: &gone},
		{ID: "m3", State: api.StateMember, Worker: api.WorkerLost, WorkerSince: &gone},
		{ID: "m4", State: api.StateMember},
	}}
	var out bytes.Buffer
	renderGroup(&out, gv, now)
	want := map[string]string{"m1": "attached", "m2": "detached 12s", "m3": "lost 12s", "m4": "-"}
	lines := strings.Split(out.String(), "\n")
	header := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "MEMBER") {
			header = i
		}
	}
	if header < 0 || !strings.Contains(lines[header], "WORKER") {
		t.Fatalf("no MEMBER ... WORKER header in:\n%s", out.String())
	}
	col := strings.Index(lines[header], "WORKER")
	for _, l := range lines[header+1 : header+5] {
		id := strings.Fields(l)[0]
		if got := strings.TrimSpace(l[col : col+len(want[id])]); got != want[id] {
			t.Errorf("%s: WORKER column %q, want %q\n%s", id, got, want[id], out.String())
		}
	}
}

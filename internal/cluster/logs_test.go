package cluster

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// appendFile appends s to the file at path.
func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestEventLogReadsAsItGrows feeds an event log in pieces, as a worker
// writes it, with a line cut by a SIGKILL and the harness's own markers.
func TestEventLogReadsAsItGrows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	l := NewEventLog("m1", path)
	if evs, err := l.Events(); err != nil || len(evs) != 0 {
		t.Fatalf("Events of a missing file = %v, %v; want none, nil", evs, err)
	}
	appendFile(t, path, `{"t":"2025-01-02T03:04:05.123456789Z","event":"start","task":"t-1","epoch":2,"checkpoint":7}`+"\n"+`{"t":"2025-01-02T03:04:05.2Z","event":"com`)
	evs, err := l.Events()
	if err != nil || len(evs) != 1 {
		t.Fatalf("Events = %+v, %v; want the start only (the commit is not complete)", evs, err)
	}
	if e := evs[0]; e.Member != "m1" || e.Type != "start" || e.Task != "t-1" || e.Epoch != 2 || e.Checkpoint != 7 ||
		!e.Time.Equal(time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)) {
		t.Errorf("start event = %+v", e)
	}
	appendFile(t, path, `mit","task":"t-1","epoch":2,"seq":40,"checkpoint":9,"records":2}`+"\n"+
		"=== scenario: start 2\n"+`{"t":"x","event":"release"`+"\n"+`{"t":"2025-01-02T03:04:06Z","event":"release","task":"t-1","epoch":2,"seq":40}`+"\n")
	evs, _ = l.Events()
	if len(evs) != 3 || evs[1].Type != "commit" || evs[1].Seq != 40 || evs[2].Type != "release" {
		t.Fatalf("Events = %+v, want start, commit, release", evs)
	}
	if n, _ := l.Bad(); n != 1 {
		t.Errorf("bad lines = %d, want 1 (the cut one)", n)
	}
}

func TestAgentLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.log")
	l := NewAgentLog("m2", path)
	appendFile(t, path, `{"level":"info","api":"127.0.0.1:4321","message":"agent started"}`+"\n"+
		`{"level":"info","member":"m2","task":"t-3","epoch":4,"seq":105,"replayed":0,"planned":true,"message":"task active"}`+"\n")
	mark := l.Lines()
	appendFile(t, path, `{"level":"error","error":"boom","message":"apply generation"}`+"\n"+
		`{"level":"info","member":"m2","task":"t-4","epoch":5,"seq":200,"replayed":12,"planned":false,"message":"task active"}`+"\n")
	if got := l.API(); got != "127.0.0.1:4321" {
		t.Errorf("API = %q", got)
	}
	if all := l.ActivationsAfter(0); len(all) != 2 || all[0] != (Activation{Member: "m2", Index: 2, Task: "t-3", Epoch: 4, Seq: 105, Planned: true}) {
		t.Errorf("ActivationsAfter(0) = %+v", all)
	}
	if after := l.ActivationsAfter(mark); len(after) != 1 || after[0].Task != "t-4" || after[0].Replayed != 12 || after[0].Planned {
		t.Errorf("ActivationsAfter(mark) = %+v, want t-4 only", after)
	}
	if errs := l.Errors(); len(errs) != 1 || errs[0] != "apply generation: boom" {
		t.Errorf("Errors = %q", errs)
	}
	l.ForgetAPI()
	if got := l.API(); got != "" {
		t.Errorf("API after ForgetAPI = %q, want none until the next start", got)
	}
}

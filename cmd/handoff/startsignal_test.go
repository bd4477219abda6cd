package main

import (
	"strings"
	"syscall"
	"testing"

	"github.com/handoffhq/handoff/internal/natstest"
)

// TestSignalDuringStart signals an agent at points of its start, each
// found by the line the agent logs there: the start is cut short, the
// agent says so, and it exits 0, as after any signal (a supervisor must
// not count a crash, and nothing failed).
func TestSignalDuringStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs agents as child processes")
	}
	// A live group to join. Its session timeout outlasts the test, so
	// that the record of an agent killed in it stays.
	ns := natstest.Start(t)
	joining := []string{"--group", "live", "--nats", ns.URL, "--listen", "127.0.0.1:0", "--tasks", "orders-0..3", "--session-timeout", "2m"}
	m1 := startAgent(t, "m1", nil, append(joining, "--member-id", "m1", "--data-dir", t.TempDir())...)
	m1.waitView(startDeadline, "state member", isMember)
	// A member ID held by an agent with another data dir, killed: an agent
	// that joins with it waits to see whether the holder is alive.
	gone := startAgent(t, "gone", nil, append(joining, "--member-id", "gone", "--data-dir", t.TempDir())...)
	_ = gone.cmd.Process.Kill()
	gone.waitExit(exitDeadline)

	tests := []struct {
		name string
		args []string
		at   string // the line the signal follows
		// racy: the signal may land after the start; the agent then
		// leaves as a started one does.
		racy bool
	}{
		{name: "before NATS is up", at: "agent starting",
			args: []string{"--group", "solo", "--member-id", "s1", "--listen", "127.0.0.1:0", "--embedded-nats-listen", "127.0.0.1:0", "--tasks", "orders-0..3"}},
		{name: "waiting for room to open the store", at: "local store: waiting for free space",
			args: append(joining, "--member-id", "m2", "--store-min-free-mb", "1000000000")},
		{name: "opening the store", at: "opening the local store", racy: true,
			args: append(joining, "--member-id", "m3")},
		{name: "joining", at: "member ID held by an agent with another data dir",
			args: append(joining, "--member-id", "gone")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
				a := spawnAgent(t, tt.name, nil, append(tt.args, "--data-dir", t.TempDir())...)
				a.waitLog(tt.at, startDeadline)
				a.signal(sig)
				if code := a.waitExit(exitDeadline); code != 0 {
					t.Fatalf("exit status after %s at %q = %d, want 0", sig, tt.at, code)
				}
				switch {
				case a.logged("start cut short by the signal"):
				case tt.racy && a.logged("agent started") && a.logged("left the group"):
					t.Logf("%s landed after the start: the agent left the group", sig)
				default:
					t.Fatalf("after %s at %q: no line saying the start was cut short by the signal", sig, tt.at)
				}
				if out := a.output(); strings.Contains(out, "Pebble is still opening it") || strings.Contains(out, `"level":"error"`) {
					t.Errorf("after %s at %q the agent reported a failure:\n%s", sig, tt.at, out)
				}
			}
		})
	}
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// TestBenchFlood runs a small flood scenario, on TCP and on the socket: an
// agent process each, a flood process, the worker in this process. Each
// phase, baseline and flood, must have timed the worker's calls and found
// its tasks kept, and each flood must have made its connections. It
// asserts no wall-clock figure.
func TestBenchFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs an agent and a flood as processes")
	}
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	args := []string{"--scenario", "flood", "--flood-transports", "tcp,unix", "--flood-body-timeouts", "1s", "--flood-conns", "20",
		"--flood-phase", "2500ms", "--flood-worker-timeout", "2s", "--flood-tasks", "2", "--json"}
	if err := Run(ctx, args, Env{Stdout: &out, Stderr: &errOut}); err != nil {
		t.Fatalf("handoff-lab bench --scenario flood: %v\nstderr:\n%s", err, errOut.String())
	}
	var res floodResults
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("--json output does not decode: %v\n%s", err, out.String())
	}
	if len(res.Phases) != 4 {
		t.Fatalf("%d phases, want 4 (a baseline and a flood on each transport): %+v", len(res.Phases), res.Phases)
	}
	for i, p := range res.Phases {
		wantConns := 20 * (i % 2)
		switch {
		case p.Conns != wantConns || p.Transport != []string{"tcp", "unix"}[i/2]:
			t.Errorf("phase %d: %s with %d flood connections, want %d", i, p.Transport, p.Conns, wantConns)
		case p.Assignment.Count == 0 || p.Commit.Count == 0:
			t.Errorf("phase %d: %d reads and %d commits timed, want some of each", i, p.Assignment.Count, p.Commit.Count)
		case !p.KeptTasks:
			t.Errorf("phase %d: the worker did not keep its tasks: %+v", i, p)
		case wantConns > 0 && (p.Flood == nil || p.Flood.Connects < int64(wantConns) || !p.Flood.Done):
			t.Errorf("phase %d: flood counters %+v, want its %d connections made and its last counters", i, p.Flood, wantConns)
		}
	}
}

func TestFloodSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a phase no longer than the worker timeout", []string{"--flood-phase", "5s", "--flood-worker-timeout", "5s"}, "--flood-phase"},
		{"a worker timeout within a poll's grace", []string{"--flood-worker-timeout", "1s"}, "--flood-worker-timeout"},
		{"an unknown transport", []string{"--flood-transports", "tcp,udp"}, "--flood-transports"},
		{"no connections", []string{"--flood-conns", "0"}, "--flood-conns"},
		{"a bad body timeout", []string{"--flood-body-timeouts", "30s,soon"}, "--flood-body-timeouts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(append([]string{"--scenario", "flood"}, tc.args...), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parse(%q) = %v, want an error naming %s", tc.args, err, tc.want)
			}
		})
	}
	s, err := parse([]string{"--scenario", "flood"}, io.Discard)
	if err != nil || !s.Processes || len(s.Flood.Conns) != 2 || len(s.Flood.Transports) != 2 || len(s.Flood.BodyTimeouts) != 2 {
		t.Errorf("parse(--scenario flood) = %+v, %v; want processes, 2 flood sizes, 2 transports, 2 body timeouts", s.Flood, err)
	}
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestScale runs the scale scenario at two tiny sizes on a nats-server
// process and checks the structure of its output: every size formed and
// was measured idle, every event ended balanced, the kill's tasks were
// served elsewhere, and the curves were drawn. It asserts no wall-clock
// figure.
func TestScale(t *testing.T) {
	if testing.Short() {
		t.Skip("runs groups of agents and a nats-server")
	}
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	args := []string{"--scenario", "scale", "--members", "3,5", "--tasks", "24", "--idle", "1s", "--settle", "0s",
		"--hold", "100ms", "--events", "join-1,leave-1,kill-1,kill-leader", "--session-timeout", "2s", "--json", "--out", dir}
	if err := Run(ctx, args, Env{Stdout: &out, Stderr: &errOut}); err != nil {
		t.Fatalf("handoff-lab bench: %v\nstderr:\n%s", err, errOut.String())
	}
	var res scaleResults
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("--json output does not decode: %v\n%s", err, out.String())
	}
	if len(res.Sizes) != 2 {
		t.Fatalf("%d sizes, want 2", len(res.Sizes))
	}
	for _, z := range res.Sizes {
		if z.Error != "" || z.Tasks != 24 || z.SessionTimeoutMS != 2000 {
			t.Errorf("%d members: error %q, %d tasks, session timeout %v ms", z.Members, z.Error, z.Tasks, z.SessionTimeoutMS)
		}
		if z.Idle.Seconds <= 0 || z.Idle.Connections < 3*z.Members || z.Idle.Member.MsgsOut == 0 {
			t.Errorf("%d members: idle not measured: %+v", z.Members, z.Idle)
		}
		if len(z.Events) != 4 {
			t.Fatalf("%d members: %d events, want 4", z.Members, len(z.Events))
		}
		for _, ev := range z.Events {
			if !ev.Balanced || ev.Error != "" || ev.Generations == 0 || ev.Moves == 0 {
				t.Errorf("%d members, %s: balanced %v after %d generations and %d moves, error %q", z.Members, ev.Name, ev.Balanced, ev.Generations, ev.Moves, ev.Error)
			}
		}
		if z.FailoverMS.Count == 0 || z.LeaderFailoverMS <= 0 || z.GenerationPublishMS.Count == 0 {
			t.Errorf("%d members: failovers %+v, leader failover %v ms, publishes %+v", z.Members, z.FailoverMS, z.LeaderFailoverMS, z.GenerationPublishMS)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "scale.svg"))
	if err != nil || !strings.Contains(string(svg), "<svg") {
		t.Errorf("scale.svg: %v", err)
	}
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/handoffhq/handoff/internal/lab"
)

// TestBenchProcesses runs a tiny scale-up and scale-down as processes (a
// nats-server, and per member a handoff agent and a counter worker) and
// checks that the counts are exact and that the breakdown found each planned
// move's steps in the processes' logs, in order. It asserts no wall-clock
// figure.
func TestBenchProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs a group of processes")
	}
	for _, sc := range []struct{ scenario, from, to string }{{"scale-up", "2", "3"}, {"scale-down", "3", "2"}} {
		t.Run(sc.scenario, func(t *testing.T) {
			var out, errOut bytes.Buffer
			e := Env{Stdout: &out, Stderr: &errOut}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			args := []string{"--processes", "--scenario", sc.scenario, "--from", sc.from, "--to", sc.to, "--tasks", "6",
				"--stateless-share", "0", "--keys", "300", "--value-size", "32", "--rate", "100", "--warmup", "300ms",
				"--hold", "200ms", "--modes", "eager", "--json"}
			if err := Run(ctx, args, e); err != nil {
				t.Fatalf("handoff-lab bench --processes: %v\nstderr:\n%s", err, errOut.String())
			}
			var res Results
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("--json output does not decode: %v\n%s", err, out.String())
			}
			if len(res.Runs) != 1 || !res.Settings.Processes {
				t.Fatalf("%d runs, processes %v; want 1 run of processes", len(res.Runs), res.Settings.Processes)
			}
			checkBreakdown(t, res.Runs[0])
		})
	}
}

// checkBreakdown checks that a run is exact and balanced and that its
// breakdown found every planned stateful move handed over directly, with
// each of its steps, in causal order.
func checkBreakdown(t *testing.T, r modeRun) {
	t.Helper()
	if r.Error != "" || !r.Exact || !r.Balanced {
		t.Fatalf("error %q, exact %v (%s), balanced %v; want a clean, exact, balanced run", r.Error, r.Exact, r.Check, r.Balanced)
	}
	b := r.Breakdown
	if b == nil || b.Moves == 0 || b.Moves != r.Pauses.PlannedStateful.Count {
		t.Fatalf("breakdown %+v for %d planned stateful moves; want one entry per move", b, r.Pauses.PlannedStateful.Count)
	}
	if b.Direct != b.Moves {
		t.Errorf("%d of %d planned stateful moves handed over directly, want all", b.Direct, b.Moves)
	}
	direct := []int{lab.StepReleaseReceived, lab.StepEntryAppended, lab.StepEntryReceived, lab.StepEntrySeen, lab.StepViewBumped, lab.StepLongPollAnswered, lab.StepFirstCommit}
	for _, step := range direct {
		if got := b.Steps[step].SinceRelease.Count; got != b.Moves {
			t.Errorf("step %q found in %d of %d moves", lab.HandoffSteps[step], got, b.Moves)
		}
	}
	// Causal order: the worker stops the task before its agent hears the
	// release, which appends the release entry before the successor sees
	// it (the successor may see it before the old owner hears the
	// append acknowledged); the successor bumps its worker's view, which
	// the worker hears before it starts the task, before its first commit
	// there.
	for _, h := range b.Handoffs {
		at := func(i int) float64 {
			if h.StepsMS[i] == nil {
				t.Fatalf("%s → %s: step %q not logged", h.Task, h.To, lab.HandoffSteps[i])
			}
			return *h.StepsMS[i]
		}
		if at(lab.StepReleaseReceived) < 0 || at(lab.StepReleaseReceived) > at(lab.StepEntryAppended) ||
			at(lab.StepReleaseReceived) > at(lab.StepEntryReceived) || at(lab.StepEntryReceived) > at(lab.StepEntrySeen) ||
			at(lab.StepEntrySeen) > at(lab.StepViewBumped) ||
			at(lab.StepViewBumped) > at(lab.StepLongPollAnswered) || at(lab.StepLongPollAnswered) > at(lab.StepFirstCommit) {
			t.Errorf("%s → %s: steps out of causal order: %v", h.Task, h.To, h.StepsMS)
		}
	}
}

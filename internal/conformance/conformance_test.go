package conformance

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The conformance runs are multi-process scenarios: a real agent, a real
// second member and the worker as a process of its own.

func runWorker(t *testing.T, argv ...string) Report {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a worker process against real agents")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, Options{Command: argv, Dir: t.TempDir(), Progress: &progress})
	if err != nil {
		t.Fatalf("Run(%q): %v\n%s", argv, err, progress.String())
	}
	var out bytes.Buffer
	_ = rep.WriteText(&out)
	t.Logf("Run(%q):\n%s%s", argv, progress.String(), out.String())
	return rep
}

func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python reference worker is not checked")
	}
	return p
}

func pythonWorker(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "examples", "python", "worker.py"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGoCounterConforms(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the counter and runs it against real agents")
	}
	bin := filepath.Join(t.TempDir(), "counter")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/counter")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/counter: %v\n%s", err, out)
	}
	if rep := runWorker(t, bin); !rep.Passed {
		t.Errorf("the Go counter failed cases %v", rep.Failed())
	}
}

func TestPythonWorkerConforms(t *testing.T) {
	py := python(t)
	if rep := runWorker(t, py, pythonWorker(t)); !rep.Passed {
		t.Errorf("examples/python/worker.py failed cases %v", rep.Failed())
	}
}

// TestBrokenWorkersFail runs the Python worker broken on purpose, one way
// at a time: the run must fail exactly the case that the breakage
// violates.
func TestBrokenWorkersFail(t *testing.T) {
	py := python(t)
	tests := []struct {
		brk  string
		want []string
	}{
		{"never-release", []string{CaseRevokedRunning, CaseRevokedIdle}},
		{"commit-after-release", []string{CaseRevokedRunning}},
		{"retry-resume", []string{CaseResume}},
		{"ignore-not-owner", []string{CaseNotOwner}},
		{"sleep-poll", []string{CasePolling}},
		{"no-timeout", []string{CaseTimeout}},
		// After a resume too, it starts from the input's beginning.
		{"ignore-checkpoint", []string{CaseStart, CaseResume}},
	}
	for _, tt := range tests {
		t.Run(tt.brk, func(t *testing.T) {
			// Two at a time (go test's -parallel is GOMAXPROCS): the runs
			// mostly wait on the worker, so this halves the test's time.
			t.Parallel()
			rep := runWorker(t, py, pythonWorker(t), "--break="+tt.brk)
			if got := rep.Failed(); !slices.Equal(got, tt.want) {
				t.Errorf("worker --break=%s failed cases %v, want %v", tt.brk, got, tt.want)
			}
		})
	}
}

// TestNoWorker checks a command that is not a worker: it exits at once, and
// the run says so instead of hanging.
func TestNoWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real agents")
	}
	rep := runWorker(t, "true")
	if rep.Passed {
		t.Fatal("a command that exits at once passed")
	}
	if len(rep.Notes) == 0 || !strings.Contains(rep.Notes[0], "exited") {
		t.Errorf("notes = %q, want the first to say the worker exited", rep.Notes)
	}
	for _, c := range rep.Cases {
		if c.Passed {
			t.Errorf("case %s passed for a worker that did nothing", c.ID)
		}
	}
}

func TestMissingCommand(t *testing.T) {
	if _, err := Run(context.Background(), Options{}); err == nil || !strings.Contains(err.Error(), "--") {
		t.Errorf("Run without a command: err = %v, want one that says to give it after --", err)
	}

}

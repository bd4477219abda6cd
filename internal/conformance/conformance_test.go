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
	return runWorkerWith(t, Options{}, argv...)
}

// runWorkerWith is runWorker with options (the command and the directory
// are set here).
func runWorkerWith(t *testing.T, o Options, argv ...string) Report {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a worker process against real agents")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	o.Command, o.Dir, o.Progress = argv, t.TempDir(), &progress
	rep, err := Run(ctx, o)
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

// buildCounter builds examples/counter for the test.
func buildCounter(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the counter and runs it against real agents")
	}
	bin := filepath.Join(t.TempDir(), "counter")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/counter")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/counter: %v\n%s", err, out)
	}
	return bin
}

func TestGoCounterConforms(t *testing.T) {
	if rep := runWorker(t, buildCounter(t)); !rep.Passed {
		t.Errorf("the Go counter failed cases %v", rep.Failed())
	}
}

// TestConformsOverUnixSocket runs the Go counter (without its cache: it
// reads every batch's counts with a batch get, in the binary form) and the
// Python worker (JSON) against an agent on a Unix socket.
func TestConformsOverUnixSocket(t *testing.T) {
	t.Run("go", func(t *testing.T) {
		if rep := runWorkerWith(t, Options{Socket: true}, buildCounter(t), "--cache=false"); !rep.Passed {
			t.Errorf("the Go counter over a Unix socket failed cases %v", rep.Failed())
		}
	})
	t.Run("python", func(t *testing.T) {
		py := python(t)
		if rep := runWorkerWith(t, Options{Socket: true}, py, pythonWorker(t)); !rep.Passed {
			t.Errorf("examples/python/worker.py over a Unix socket failed cases %v", rep.Failed())
		}
	})
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

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

	"github.com/handoffhq/handoff/countworker"
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
	return build(t, "./examples/counter")
}

// build builds the command pkg of the module for the test.
func build(t *testing.T, pkg string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a worker and runs it against real agents")
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// withProducer wraps a worker's command so that it brings its own input:
// examples/producer publishes the counting job's input to the run's NATS
// server while the worker runs, as a team's command would start its own
// source. The run starts the command twice, so the input comes twice as
// fast; the job is the same.
func withProducer(t *testing.T, argv ...string) []string {
	t.Helper()
	producer := build(t, "./examples/producer")
	script := `"$0" --nats "$NATS_URL" --group "$HANDOFF_GROUP" --tasks "$HANDOFF_TASKS" --rate 200 >/dev/null 2>&1 & p=$!
"$@"; s=$?
kill $p; wait $p
exit $s`
	return append([]string{"sh", "-c", script, producer}, argv...)
}

// TestOwnJobWorkerConforms runs a worker whose job the run does not know,
// which brings its own input and checks its own state, as it is: it passes
// --job own with start-from-checkpoint skipped, and fails the counting job,
// whose counts it does not write.
func TestOwnJobWorkerConforms(t *testing.T) {
	own := build(t, "./internal/conformance/testdata/ownjob")
	t.Run("own", func(t *testing.T) {
		rep := runWorkerWith(t, Options{Job: JobOwn}, own)
		if !rep.Passed {
			t.Errorf("a worker of its own job failed cases %v with --job own", rep.Failed())
		}
		if got := rep.Skipped(); !slices.Equal(got, []string{CaseStart}) {
			t.Errorf("--job own skipped cases %v, want %v", got, []string{CaseStart})
		}
		for _, c := range rep.Cases {
			if c.Skipped && !strings.Contains(c.Reason, "counting job") {
				t.Errorf("case %s is skipped with reason %q, which does not say it needs the counting job", c.ID, c.Reason)
			}
		}
	})
	t.Run("count", func(t *testing.T) {
		rep := runWorker(t, own)
		if rep.Passed || !slices.Contains(rep.Failed(), CaseStart) {
			t.Errorf("a worker of its own job run as the counting job failed cases %v, want %s among them", rep.Failed(), CaseStart)
		}
		if len(rep.Skipped()) > 0 {
			t.Errorf("the counting job skipped cases %v", rep.Skipped())
		}
	})
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
// at a time, as the counting job and, bringing its own input, as a job of
// its own: the run must fail exactly the case that the breakage violates.
func TestBrokenWorkersFail(t *testing.T) {
	py := python(t)
	tests := []struct {
		brk  string
		want []string
		// own is what --job own fails: the same cases, but for a worker
		// that ignores its checkpoint, which only the known job's counts
		// show (start-from-checkpoint is skipped, and the commits after a
		// 409 resume are not checked against counts).
		own []string
	}{
		{"never-release", []string{CaseRevokedRunning, CaseRevokedIdle}, nil},
		{"commit-after-release", []string{CaseRevokedRunning}, nil},
		{"retry-resume", []string{CaseResume}, nil},
		{"ignore-not-owner", []string{CaseNotOwner}, nil},
		{"sleep-poll", []string{CasePolling}, nil},
		{"no-timeout", []string{CaseTimeout}, nil},
		// After a resume too, it starts from the input's beginning.
		{"ignore-checkpoint", []string{CaseStart, CaseResume}, []string{}},
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
		t.Run(tt.brk+"/own", func(t *testing.T) {
			t.Parallel()
			want := tt.want
			if tt.own != nil {
				want = tt.own
			}
			rep := runWorkerWith(t, Options{Job: JobOwn}, withProducer(t, py, pythonWorker(t), "--break="+tt.brk)...)
			if got := rep.Failed(); !slices.Equal(got, want) {
				t.Errorf("worker --break=%s failed cases %v with --job own, want %v", tt.brk, got, want)
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
	if _, err := Run(context.Background(), Options{Command: []string{"true"}, Job: "sum"}); err == nil || !strings.Contains(err.Error(), JobOwn) {
		t.Errorf("Run with an unknown job: err = %v, want one that names the jobs", err)
	}
}

// TestInputNames keeps the counting job's input where the example workers
// read it.
func TestInputNames(t *testing.T) {
	if got, want := inputStream("g"), countworker.StreamName("g"); got != want {
		t.Errorf("inputStream(g) = %q, want %q (countworker's)", got, want)
	}
	if got, want := inputSubject("g", "t-1"), countworker.InputSubject("g", "t-1"); got != want {
		t.Errorf("inputSubject(g, t-1) = %q, want %q (countworker's)", got, want)
	}
}

// Command ownjob is a worker whose job handoff conformance does not know,
// for the tests of 'handoff conformance --job own'. It brings its own
// input: each of its tasks is a ledger of steps 1, 2, 3, ... that it makes
// up itself, one step every 20 ms, committing after each step the step
// reached (n), the sum of the steps so far (sum) and, as the checkpoint,
// "step N". It checks its own state: a task must start from a checkpoint
// that agrees with the state (n = N, sum = N(N+1)/2) and that no
// acknowledged commit is missing from. On a failed check it exits with
// status 1.
//
// It runs on the Go client's runner (client.Run), reading SIDECAR_URL and
// SIDECAR_TOKEN; it reads no NATS and no HANDOFF_* variable.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ownjob:", err)
		os.Exit(1)
	}
}

// errSelfCheck is the cause of a run ended by a failed check.
var errSelfCheck = errors.New("self-check failed")

func run(ctx context.Context) error {
	url := os.Getenv("SIDECAR_URL")
	if url == "" {
		return errors.New("SIDECAR_URL is not set")
	}
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	w := &worker{acked: map[string]uint64{}, fail: fail}
	log := zerolog.New(os.Stderr).With().Timestamp().Logger()
	c := client.New(url, client.WithToken(os.Getenv("SIDECAR_TOKEN")))
	if err := client.Run(ctx, c, w.task, client.RunOptions{Logger: log}); err != nil {
		return err
	}
	if cause := context.Cause(ctx); errors.Is(cause, errSelfCheck) {
		return cause
	}
	return nil
}

// worker remembers, per task, the last step a commit of this process was
// acknowledged at: no later start may begin before it.
type worker struct {
	mu    sync.Mutex
	acked map[string]uint64
	fail  context.CancelCauseFunc
}

func (w *worker) task(ctx context.Context, t client.Task) error {
	if !t.Stateful {
		<-ctx.Done()
		return nil
	}
	n, sum, err := w.start(ctx, t)
	if err != nil {
		return err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil // every step is committed: nothing is pending
		case <-tick.C:
		}
		n++
		sum += n
		cp := []byte("step " + strconv.FormatUint(n, 10))
		puts := []api.KV{{Key: []byte("n"), Value: []byte(strconv.FormatUint(n, 10))}, {Key: []byte("sum"), Value: []byte(strconv.FormatUint(sum, 10))}}
		if _, err := t.Commit(ctx, puts, nil, cp); err != nil {
			return err // the runner restarts the task, or leaves it on not_owner
		}
		w.mu.Lock()
		w.acked[t.ID] = max(w.acked[t.ID], n)
		w.mu.Unlock()
	}
}

// start checks the task's checkpoint against its state and against the
// commits this process had acknowledged, and returns where to go on from.
func (w *worker) start(ctx context.Context, t client.Task) (n, sum uint64, err error) {
	if len(t.Checkpoint) > 0 {
		s, ok := strings.CutPrefix(string(t.Checkpoint), "step ")
		if n, err = strconv.ParseUint(s, 10, 64); !ok || err != nil {
			return 0, 0, w.failed("task %s: checkpoint %q is not one this job writes", t.ID, t.Checkpoint)
		}
	}
	vals, err := t.GetMany(ctx, [][]byte{[]byte("n"), []byte("sum")})
	if err != nil {
		return 0, 0, fmt.Errorf("read task %s: %w", t.ID, err)
	}
	gotN, gotSum := string(vals[0]), string(vals[1])
	if n == 0 && (vals[0] != nil || vals[1] != nil) {
		return 0, 0, w.failed("task %s: no checkpoint, but its state has n=%q sum=%q", t.ID, gotN, gotSum)
	}
	sum = n * (n + 1) / 2
	if n > 0 && (gotN != strconv.FormatUint(n, 10) || gotSum != strconv.FormatUint(sum, 10)) {
		return 0, 0, w.failed("task %s: checkpoint step %d, but its state has n=%q sum=%q (want %d, %d)", t.ID, n, gotN, gotSum, n, sum)
	}
	w.mu.Lock()
	acked := w.acked[t.ID]
	w.mu.Unlock()
	if n < acked {
		return 0, 0, w.failed("task %s: starts from step %d, but a commit at step %d was acknowledged", t.ID, n, acked)
	}
	return n, sum, nil
}

// failed ends the worker: its state is not what its commits made it.
func (w *worker) failed(format string, args ...any) error {
	err := fmt.Errorf("%w: "+format, append([]any{errSelfCheck}, args...)...)
	fmt.Fprintln(os.Stderr, "ownjob:", err)
	w.fail(err)
	return err
}

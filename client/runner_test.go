package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

// harness runs Run against a fake agent over HTTP and collects its events.
type harness struct {
	t      *testing.T
	agent  *httpapitest.Backend
	client *Client
	events chan Event
	done   chan struct{} // closed when Run returned
	err    error         // what Run returned
	cancel context.CancelFunc
}

func startRun(t *testing.T, agent *httpapitest.Backend, fn TaskFunc, wrap func(http.Handler) http.Handler) *harness {
	t.Helper()
	return startRunOpts(t, agent, fn, wrap, RunOptions{})
}

// startRunOpts is startRun with opts (its OnEvent, RestartBackoff and
// PollWait are the harness's).
func startRunOpts(t *testing.T, agent *httpapitest.Backend, fn TaskFunc, wrap func(http.Handler) http.Handler, opts RunOptions) *harness {
	t.Helper()
	var h http.Handler = httpapi.New(agent, httpapi.Options{}).Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	ctx, cancel := context.WithCancel(context.Background())
	hs := &harness{t: t, agent: agent, client: New(srv.URL), events: make(chan Event, 1000), done: make(chan struct{}), cancel: cancel}
	opts.OnEvent = func(ev Event) { hs.events <- ev }
	opts.RestartBackoff = time.Millisecond
	opts.PollWait = time.Minute
	go func() {
		hs.err = Run(ctx, hs.client, fn, opts)
		close(hs.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-hs.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
		srv.Close()
	})
	return hs
}

// next returns the next event, failing the test if none comes.
func (h *harness) next() Event {
	h.t.Helper()
	select {
	case ev := <-h.events:
		return ev
	case <-time.After(10 * time.Second):
		h.t.Fatal("no event within 10s")
		return Event{}
	}
}

// expect checks that the next events are of the given types for task.
func (h *harness) expect(task string, types ...EventType) []Event {
	h.t.Helper()
	var got []Event
	for _, want := range types {
		ev := h.next()
		got = append(got, ev)
		if ev.Type != want || ev.Task != task {
			h.t.Fatalf("event %d = %s %s (%+v), want %s %s", len(got), ev.Type, ev.Task, ev, want, task)
		}
	}
	return got
}

func (h *harness) wait() error {
	h.t.Helper()
	select {
	case <-h.done:
		return h.err
	case <-time.After(10 * time.Second):
		h.t.Fatal("Run did not return")
		return nil
	}
}

// finalCommit is a TaskFunc that waits for its stop and then commits
// checkpoint "final-<epoch>" with the context it was given.
func finalCommit(ctx context.Context, t Task) error {
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), ErrStopped) {
		return fmt.Errorf("task context ended with cause %v, want ErrStopped", context.Cause(ctx))
	}
	_, err := t.Commit(ctx, []api.KV{{Key: []byte("k"), Value: []byte("last")}}, nil, fmt.Appendf(nil, "final-%d", t.Epoch))
	return err
}

func TestRunStartsActiveTasksOnly(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 3, Checkpoint: "cp1"})
	agent.Set("t2", httpapitest.Task{Role: api.RoleLearner, Epoch: 1})
	started := make(chan Task, 10)
	h := startRun(t, agent, func(ctx context.Context, t Task) error {
		started <- t
		<-ctx.Done()
		return nil
	}, nil)
	ev := h.expect("t1", EventStart)[0]
	if ev.Epoch != 3 || string(ev.Checkpoint) != "cp1" {
		t.Errorf("start event = %+v, want epoch 3 checkpoint cp1", ev)
	}
	if got := <-started; got.ID != "t1" || got.Epoch != 3 || string(got.Checkpoint) != "cp1" || !got.Stateful || got.Client == nil {
		t.Errorf("fn got %+v, want t1 at epoch 3 from cp1 with a client", got)
	}
	agent.Set("t2", httpapitest.Task{Role: api.RoleActive, Epoch: 2, Checkpoint: "cp2"}) // promoted
	h.expect("t2", EventStart)
	if got := <-started; got.ID != "t2" || got.Epoch != 2 {
		t.Errorf("fn got %+v, want t2 at epoch 2", got)
	}
}

func TestRunRevokeCommitsThenReleases(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 3, Checkpoint: "cp1"})
	h := startRun(t, agent, finalCommit, nil)
	h.expect("t1", EventStart)
	agent.Revoke("t1")
	evs := h.expect("t1", EventStop, EventRelease)
	if string(evs[0].Checkpoint) != "final-3" || evs[0].Seq != 1 {
		t.Errorf("stop event = %+v, want the final commit's checkpoint final-3 and seq 1", evs[0])
	}
	if evs[1].Seq != 1 || evs[1].Epoch != 3 {
		t.Errorf("release event = %+v, want seq 1 epoch 3", evs[1])
	}
	if got, want := agent.Ops(), []string{"commit t1 final-3", "release t1"}; !slices.Equal(got, want) {
		t.Errorf("agent saw %q, want %q", got, want)
	}
}

func TestRunShutdown(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	h := startRun(t, agent, finalCommit, nil)
	h.expect("t1", EventStart)
	agent.Revoke("t1")
	h.expect("t1", EventStop, EventRelease)
	agent.Shutdown()
	h.expect("", EventShutdown)
	if err := h.wait(); err != nil {
		t.Errorf("Run = %v, want nil on shutdown", err)
	}
}

func TestRunReturnsWhenDone(t *testing.T) {
	agent := httpapitest.New()
	h := startRun(t, agent, finalCommit, nil)
	agent.SetState(api.StateDone)
	h.expect("", EventShutdown)
	if err := h.wait(); err != nil {
		t.Errorf("Run = %v, want nil once the member is done", err)
	}
}

func TestRunRestartsFailedTaskFromLatestCheckpoint(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1, Checkpoint: "cp1"})
	var calls atomic.Int32
	checkpoints := make(chan string, 10)
	h := startRun(t, agent, func(ctx context.Context, t Task) error {
		checkpoints <- string(t.Checkpoint)
		switch calls.Add(1) {
		case 1:
			if _, err := t.Commit(ctx, nil, nil, []byte("cp2")); err != nil {
				return err
			}
			return errors.New("input broke")
		case 2:
			panic("bug in the task function")
		}
		<-ctx.Done()
		return nil
	}, nil)
	evs := h.expect("t1", EventStart, EventRestart, EventStart, EventRestart, EventStart)
	if evs[1].Err == nil || evs[1].Backoff <= 0 || evs[3].Err == nil {
		t.Errorf("restart events %+v and %+v, want the errors and a backoff", evs[1], evs[3])
	}
	if got := []string{<-checkpoints, <-checkpoints, <-checkpoints}; !slices.Equal(got, []string{"cp1", "cp2", "cp2"}) {
		t.Errorf("fn started from checkpoints %q, want cp1, then cp2 twice", got)
	}
}

func TestRunLeavesRefusedTaskAlone(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	agent.Fail("Commit", fmt.Errorf("task t1 is owned by m2 now: %w", api.ErrNotOwner))
	var calls atomic.Int32
	h := startRun(t, agent, func(ctx context.Context, t Task) error {
		calls.Add(1)
		_, err := t.Commit(ctx, nil, nil, []byte("cp"))
		return err
	}, nil)
	h.expect("t1", EventStart)
	if ev := h.expect("t1", EventRefused)[0]; ev.Code != api.CodeNotOwner {
		t.Errorf("refused event = %+v, want code not_owner", ev)
	}
	agent.Remove("t1")
	agent.Set("t2", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	h.expect("t2", EventStart) // t1 got no stop, release or restart in between
	if n := calls.Load(); n != 2 {
		t.Errorf("fn called %d times, want once per task", n)
	}
	if ops := agent.Ops(); len(ops) != 0 {
		t.Errorf("agent saw %q, want no release", ops)
	}
}

func TestRunRestartsOnEpochChange(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	h := startRun(t, agent, finalCommit, nil)
	h.expect("t1", EventStart)
	agent.SetEpoch("t1", 2)
	evs := h.expect("t1", EventStop, EventStart)
	if evs[0].Epoch != 1 || evs[1].Epoch != 2 {
		t.Errorf("events %+v, want stop at epoch 1 then start at epoch 2", evs)
	}
	// The final commit of epoch 1 was refused (stale epoch); nothing released.
	if ops := agent.Ops(); len(ops) != 0 {
		t.Errorf("agent saw %q, want nothing (no release, stale commit refused)", ops)
	}
}

func TestRunStopsTaskThatDisappears(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	agent.Set("t2", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	h := startRun(t, agent, func(ctx context.Context, _ Task) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}, nil)
	if a, b := h.next(), h.next(); a.Type != EventStart || b.Type != EventStart || a.Task == b.Task {
		t.Fatalf("events %+v, %+v; want t1 and t2 to start", a, b)
	}
	agent.Remove("t1")
	h.expect("t1", EventStop)
	agent.Shutdown()
	h.expect("t2", EventStop) // stopped at shutdown; not revoked: the release is refused, no release event
	h.expect("", EventShutdown)
}

func TestRunStopsTasksWhenContextEnds(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	h := startRun(t, agent, finalCommit, nil)
	h.expect("t1", EventStart)
	h.cancel()
	if err := h.wait(); err != nil {
		t.Errorf("Run = %v, want nil when ctx ends", err)
	}
	if ev := h.expect("t1", EventStop)[0]; string(ev.Checkpoint) != "final-1" {
		t.Errorf("stop event = %+v, want the final commit made after the stop", ev)
	}
	if got, want := agent.Ops(), []string{"commit t1 final-1"}; !slices.Equal(got, want) {
		t.Errorf("agent saw %q, want %q (no release of a task that was not revoked)", got, want)
	}
}

func TestRunRetriesUnreachableAgent(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	var fails atomic.Int32
	flaky := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/assignment" && fails.Add(1) <= 2 {
				http.Error(w, `{"code":"unavailable","message":"starting"}`, http.StatusServiceUnavailable)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	h := startRun(t, agent, finalCommit, flaky)
	h.expect("t1", EventStart)
	if n := fails.Load(); n < 3 {
		t.Errorf("assignment asked %d times, want 2 failures and a success", n)
	}
}

func TestTaskContextOutlivesStopOnly(t *testing.T) {
	tests := []struct {
		name  string
		cause error
		want  error // the cause the task context ends with
	}{
		// A runner stop leaves the final call its StopTimeout; only then
		// is it cut off.
		{"stopped by the runner", ErrStopped, context.DeadlineExceeded},
		{"cancelled by the caller", context.Canceled, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const stopTimeout = 20 * time.Millisecond
			parent, cancel := context.WithCancelCause(context.Background())
			ctx, done := Task{ID: "t1", run: &taskRun{stopTimeout: stopTimeout}}.context(parent)
			defer done()
			stopped := time.Now()
			cancel(tt.cause)
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("task context still alive 10s after its parent ended")
			}
			lived := time.Since(stopped)
			if got := context.Cause(ctx); !errors.Is(got, tt.want) || (tt.cause == ErrStopped && errors.Is(got, ErrStopped)) {
				t.Errorf("task context ended with %v, want %v", got, tt.want)
			}
			// A lower bound only: the stop's grace cannot end early.
			if tt.cause == ErrStopped && lived < stopTimeout {
				t.Errorf("task context ended %v after a runner stop, want at least StopTimeout (%v)", lived, stopTimeout)
			}
		})
	}
}

// TestRunReleasesRevokedTaskItNeverRan: a task revoked before the worker
// first saw it active is released at once, with no start.
func TestRunReleasesRevokedTaskItNeverRan(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 4, Checkpoint: "cp"})
	agent.Revoke("t1")
	started := make(chan struct{}, 1)
	h := startRun(t, agent, func(ctx context.Context, t Task) error {
		started <- struct{}{}
		<-ctx.Done()
		return nil
	}, nil)
	ev := h.expect("t1", EventRelease)[0]
	if ev.Epoch != 4 {
		t.Errorf("release event = %+v, want epoch 4", ev)
	}
	if got, want := agent.Ops(), []string{"release t1"}; !slices.Equal(got, want) {
		t.Errorf("agent saw %q, want %q", got, want)
	}
	select {
	case <-started:
		t.Error("the revoked task was started")
	default:
	}
}

// TestRunRestartAtSameEpochResumesAfterTheLastCommit: a task dropped from
// the view and given back at the same epoch while its run was still making
// its final commit restarts after that commit, not from the checkpoint in
// the (older) view that gave it back.
func TestRunRestartAtSameEpochResumesAfterTheLastCommit(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 2, Checkpoint: "c0"})
	stopping := make(chan struct{})
	proceed := make(chan struct{})
	starts := make(chan Task, 2)
	h := startRun(t, agent, func(ctx context.Context, t Task) error {
		starts <- t
		if len(starts) > 1 || string(t.Checkpoint) != "c0" {
			<-ctx.Done()
			return nil
		}
		<-ctx.Done()
		close(stopping)
		<-proceed // the view gives the task back meanwhile
		_, err := t.Commit(ctx, nil, nil, []byte("c1"))
		return err
	}, nil)
	h.expect("t1", EventStart)
	<-starts
	agent.Remove("t1")
	<-stopping
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 2, Checkpoint: "c0"}) // the view still says c0
	close(proceed)
	h.expect("t1", EventStop, EventStart)
	if got := <-starts; string(got.Checkpoint) != "c1" {
		t.Errorf("restarted from %q, want c1, the stopped run's last commit", got.Checkpoint)
	}
}

// TestRunRestartAtSameEpochAfterALostAck: a run whose last commit landed
// but was not acknowledged, given back at the same epoch, resumes from the
// view's checkpoint (which holds that commit), not from its last
// acknowledged one.
func TestRunRestartAtSameEpochAfterALostAck(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 2, Checkpoint: "c0"})
	starts := make(chan Task, 2)
	lost := make(chan error, 1)
	h := startRun(t, agent, func(ctx context.Context, tk Task) error {
		starts <- tk
		if len(starts) > 1 {
			<-ctx.Done()
			return nil
		}
		if _, err := tk.Commit(ctx, nil, nil, []byte("c1")); err != nil {
			return err
		}
		agent.Fail("CommitAck", api.ErrUnavailable)
		_, err := tk.Commit(ctx, nil, nil, []byte("c2"))
		agent.Fail("CommitAck", nil)
		lost <- err
		<-ctx.Done()
		return nil
	}, nil)
	h.expect("t1", EventStart)
	<-starts
	if err := <-lost; err == nil {
		t.Fatal("the commit whose acknowledgement was lost succeeded")
	}
	agent.Remove("t1")
	h.expect("t1", EventStop)
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 2, Checkpoint: "c2", Seq: 2}) // the agent caught up with c2
	h.expect("t1", EventStart)
	if got := <-starts; string(got.Checkpoint) != "c2" {
		t.Errorf("restarted from %q, want c2: the view's copy holds the unacknowledged commit", got.Checkpoint)
	}
}

// lostAckTask is a TaskFunc for task t1 that sends each run's checkpoint on
// checkpoints. Its first run commits cp2, calls before, commits cp3 with the
// acknowledgement lost (the commit lands, the call fails with ack), calls
// after (if set) and returns the commit's error; the runs after it wait for
// their stop.
func lostAckTask(agent *httpapitest.Backend, checkpoints chan<- string, ack error, before, after func()) TaskFunc {
	var runs atomic.Int32
	return func(ctx context.Context, tk Task) error {
		checkpoints <- string(tk.Checkpoint)
		if runs.Add(1) > 1 {
			<-ctx.Done()
			return nil
		}
		if _, err := tk.Commit(ctx, nil, nil, []byte("cp2")); err != nil {
			return err
		}
		before()
		agent.Fail("CommitAck", ack)
		_, err := tk.Commit(ctx, nil, nil, []byte("cp3"))
		agent.Fail("CommitAck", nil)
		if after != nil {
			after()
		}
		return fmt.Errorf("commit: %w", err)
	}
}

// TestRunRestartWaitsForAReactivation: a task function that fails after a
// commit whose acknowledgement was lost, while the agent activates the task
// again at the same epoch (its copy replays that commit), restarts from the
// checkpoint the agent shows once the task is active again, not from the
// last acknowledged one. The runner's own view polls are held back
// meanwhile, so that only the restart's read of the checkpoint can see the
// reactivation.
func TestRunRestartWaitsForAReactivation(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1, Checkpoint: "cp1"})
	var holding atomic.Bool
	release := make(chan struct{})
	read := make(chan struct{}, 10) // a read of the checkpoint was answered
	wrap := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/assignment" {
				h.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if holding.Load() {
				if after := r.URL.Query().Get("after"); after == "" || after == "0" {
					read <- struct{}{}
				} else {
					<-release
				}
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
		})
	}
	checkpoints := make(chan string, 10)
	h := startRun(t, agent, lostAckTask(agent, checkpoints, api.ErrResume, func() { holding.Store(true) }, func() {
		agent.SetRole("t1", api.RoleLearner) // shown as learner until cp3's commit is replayed
	}), wrap)
	if ev := h.expect("t1", EventStart, EventRestart)[1]; !errors.Is(ev.Err, ErrResume) || ev.Backoff != 0 {
		t.Errorf("restart event %+v, want the resume error and no backoff", ev)
	}
	<-read
	agent.SetRole("t1", api.RoleActive)
	holding.Store(false)
	close(release)
	for {
		ev := h.next()
		if ev.Type == EventStop {
			continue
		}
		if ev.Type != EventStart || ev.Task != "t1" {
			t.Fatalf("event %+v, want t1 to start again", ev)
		}
		break
	}
	<-checkpoints
	if got := <-checkpoints; got != "cp3" {
		t.Errorf("restarted from %q, want cp3: the commit whose acknowledgement was lost is in the agent's copy", got)
	}
}

// TestRunRestartRetriesTheCheckpointRead: after a commit whose
// acknowledgement was lost (refused with 409 resume, or answered 503 after
// it landed), a read of the task's checkpoint that fails (here a 503 on
// /assignment) is retried, and the task restarts from the checkpoint the
// agent holds, which includes that commit, not from the last one
// acknowledged here (that would process the batch twice).
func TestRunRestartRetriesTheCheckpointRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		ack  error // the lost acknowledgement's answer
	}{
		{"resume", api.ErrResume},
		{"unavailable", api.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agent := httpapitest.New()
			agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1, Checkpoint: "cp1"})
			var failNext atomic.Bool
			failed := make(chan struct{}, 1)
			flaky := func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					// The runner's own poll waits at after=version: only the
					// read of the checkpoint asks from the start.
					if r.URL.Path == "/assignment" && r.URL.Query().Get("after") == "0" && failNext.CompareAndSwap(true, false) {
						http.Error(w, `{"code":"unavailable","message":"injected"}`, http.StatusServiceUnavailable)
						failed <- struct{}{}
						return
					}
					next.ServeHTTP(w, r)
				})
			}
			checkpoints := make(chan string, 10)
			h := startRun(t, agent, lostAckTask(agent, checkpoints, tc.ack, func() { failNext.Store(true) }, nil), flaky)
			if ev := h.expect("t1", EventStart, EventRestart)[1]; !errors.Is(ev.Err, tc.ack) {
				t.Errorf("restart event %+v, want the error %v", ev, tc.ack)
			}
			h.expect("t1", EventStart)
			select {
			case <-failed:
			default:
				t.Fatal("the read of the checkpoint after the restart was not failed: the test did not inject its 503")
			}
			<-checkpoints
			if got := <-checkpoints; got != "cp3" {
				t.Errorf("restarted from %q, want cp3: the agent holds the commit whose acknowledgement was lost", got)
			}
		})
	}
}

// TestRunRevokeEndsTheCheckpointRead: a task whose checkpoint cannot be
// read after a 409 resume (every read fails) does not restart, and still
// stops and is released when it is revoked meanwhile.
func TestRunRevokeEndsTheCheckpointRead(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1, Checkpoint: "c0"})
	reads := make(chan struct{}, 100)
	failing := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/assignment" && r.URL.Query().Get("after") == "0" && agent.Calls("Commit") > 0 {
				http.Error(w, `{"code":"unavailable","message":"injected"}`, http.StatusServiceUnavailable)
				select {
				case reads <- struct{}{}:
				default:
				}
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	h := startRun(t, agent, func(ctx context.Context, tk Task) error {
		agent.Fail("CommitAck", api.ErrResume)
		_, err := tk.Commit(ctx, nil, nil, []byte("c1"))
		agent.Fail("CommitAck", nil)
		return fmt.Errorf("commit: %w", err)
	}, failing)
	h.expect("t1", EventStart, EventRestart)
	<-reads
	<-reads // retried
	agent.Revoke("t1")
	h.expect("t1", EventStop, EventRelease)
}

package client

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/rs/zerolog"
)

// ErrStopped is the cause (context.Cause) of a task context that Run
// cancelled because the task must stop: it was revoked, moved, or Run is
// ending. A TaskFunc that sees it should finish its batch, make its final
// commit and return.
var ErrStopped = errors.New("task stopped by the runner")

// Defaults of RunOptions.
const (
	DefaultPollWait          = 30 * time.Second
	DefaultRestartBackoff    = 500 * time.Millisecond
	DefaultMaxRestartBackoff = 30 * time.Second
	DefaultStopTimeout       = 10 * time.Second
)

// Log field names.
const (
	fieldTask    = "task"
	fieldEpoch   = "epoch"
	fieldBackoff = "backoff"
)

// Task is one task Run started on this member, as its TaskFunc sees it.
type Task struct {
	ID    string
	Epoch uint64 // the ownership this run belongs to; Commit sends it
	// Checkpoint is the input position to resume from (empty: from the start).
	Checkpoint []byte
	Stateful   bool
	Client     *Client
	// Prepared is what RunOptions.Prepare returned for this task while it
	// was a learner or standby here, on the first run after it became
	// active here; nil otherwise (no Prepare, it failed, or a restart: the
	// first run owned it). The task function owns it (close it when done).
	Prepared any

	run *taskRun // nil for a Task made by hand
}

// taskRun is what a task's supervisor shares with its Task values.
type taskRun struct {
	stopTimeout time.Duration

	mu         sync.Mutex
	seq        uint64 // changelog sequence of the last acknowledged commit
	checkpoint []byte // checkpoint of the last acknowledged commit, or the start's
}

func (r *taskRun) last() (seq uint64, checkpoint []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq, r.checkpoint
}

// Commit commits puts, deletes and checkpoint (empty keeps the previous
// one) for this task at t.Epoch, so that a commit left over from an older
// ownership is refused with ErrNotOwner.
//
// Task's methods outlive a stop: when ctx was cancelled by Run with
// ErrStopped, they still run, for up to RunOptions.StopTimeout, so the
// TaskFunc can finish its batch and make its final commit with the ctx it
// was given. Any other end of ctx (a deadline of the caller's) ends them.
func (t Task) Commit(ctx context.Context, puts []api.KV, deletes [][]byte, checkpoint []byte) (api.CommitResult, error) {
	ctx, cancel := t.context(ctx)
	defer cancel()
	res, err := t.Client.Commit(ctx, t.ID, api.CommitRequest{Puts: puts, Deletes: deletes, Checkpoint: checkpoint, Epoch: t.Epoch})
	if err != nil {
		return res, fmt.Errorf("commit task %s at epoch %d: %w", t.ID, t.Epoch, err)
	}
	if t.run != nil {
		t.run.mu.Lock()
		t.run.seq = res.Seq
		if len(checkpoint) > 0 {
			t.run.checkpoint = checkpoint
		}
		t.run.mu.Unlock()
	}
	return res, nil
}

// Get reads key of this task's state; see Client.Get. It keeps working
// after a stop, like Commit.
func (t Task) Get(ctx context.Context, key []byte) ([]byte, error) {
	ctx, cancel := t.context(ctx)
	defer cancel()
	return t.Client.Get(ctx, t.ID, key)
}

// GetMany reads keys of this task's state at once; see Client.GetMany. It
// keeps working after a stop, like Commit.
func (t Task) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	ctx, cancel := t.context(ctx)
	defer cancel()
	return t.Client.GetMany(ctx, t.ID, keys)
}

// Scan reads this task's state; see Client.Scan. It keeps working after a
// stop, like Commit.
func (t Task) Scan(ctx context.Context, o api.ScanOptions) ([]api.KV, error) {
	ctx, cancel := t.context(ctx)
	defer cancel()
	return t.Client.Scan(ctx, t.ID, o)
}

// context returns ctx, except that a cancellation by Run (cause ErrStopped)
// only ends it StopTimeout later.
func (t Task) context(ctx context.Context) (context.Context, context.CancelFunc) {
	timeout := DefaultStopTimeout
	if t.run != nil {
		timeout = t.run.stopTimeout
	}
	out, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	var timer *time.Timer
	var mu sync.Mutex
	stop := context.AfterFunc(ctx, func() {
		cause := context.Cause(ctx)
		if !errors.Is(cause, ErrStopped) {
			cancel(cause)
			return
		}
		mu.Lock()
		timer = time.AfterFunc(timeout, func() {
			cancel(fmt.Errorf("final call of task %s still running %v after the stop: %w", t.ID, timeout, context.DeadlineExceeded))
		})
		mu.Unlock()
	})
	return out, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel(context.Canceled)
	}
}

// TaskFunc processes one task until ctx ends. When ctx ends with cause
// ErrStopped it should stop consuming, commit what is pending (Task's
// methods still work) and return. Returning an error restarts the task from
// its latest checkpoint after a backoff (the agent's, read again from
// /assignment until it answers, since a commit whose acknowledgement was
// lost is only in that one), unless the error matches ErrNotOwner: then the
// task is left alone until the agent's view changes.
// Returning nil without being stopped means the task has nothing more to do
// here; it is released when revoked.
type TaskFunc func(ctx context.Context, t Task) error

// EventType says what an Event reports. These are the one definition of a
// Go worker's event names: a worker that logs its events (examples/counter)
// writes them, and the checkers that read such logs compare against them.
type EventType string

// Events of Run, in the order a task goes through them.
const (
	EventPrepare EventType = "prepare" // Prepare is called for a learner or standby: Task, Epoch, Role, Checkpoint and Seq (the hint)
	EventDiscard EventType = "discard" // a preparation was closed: its task left without becoming active here
	EventStart   EventType = "start"   // fn is starting: Task, Epoch, Checkpoint
	// EventCommit is not emitted by Run: it names a commit the agent
	// acknowledged, for workers that log their own commits beside Run's
	// events (the Seq of Task.Commit's result).
	EventCommit   EventType = "commit"
	EventRestart  EventType = "restart"  // fn failed (Err); it restarts after Backoff
	EventRefused  EventType = "refused"  // fn returned ErrNotOwner (Code); the task is left alone
	EventStop     EventType = "stop"     // fn returned after a stop: Seq and Checkpoint of its last commit
	EventRelease  EventType = "release"  // the agent acknowledged the release: Seq of the task's last commit
	EventShutdown EventType = "shutdown" // the view says shutdown; every task has stopped and Run returns
)

// Event is something Run did, for observability (RunOptions.OnEvent).
type Event struct {
	Time       time.Time
	Type       EventType
	Task       string
	Epoch      uint64
	Checkpoint []byte
	Seq        uint64
	Role       string        // EventPrepare: the task's role
	Code       string        // API error code (EventRefused)
	Err        error         // EventRestart
	Backoff    time.Duration // EventRestart
}

// RunOptions configure Run. Zero values mean the defaults above.
type RunOptions struct {
	Logger zerolog.Logger
	// OnEvent, if set, is called for every Event, one call at a time; it
	// must return quickly, as it delays the task that caused the event.
	OnEvent func(Event)
	// PollWait is the long-poll's wait; the agent caps it.
	PollWait time.Duration
	// RestartBackoff is the pause before the first restart of a failed
	// task; it doubles on each further failure up to MaxRestartBackoff.
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration
	// StopTimeout bounds the calls a stopped task still makes (its final
	// commit) and the release after it.
	StopTimeout time.Duration
	// Prepare, if set, readies the input of each stateful task that is a
	// learner or standby here, before it becomes active (see PrepareFunc).
	Prepare PrepareFunc
}

func (o *RunOptions) setDefaults() {
	if o.PollWait <= 0 {
		o.PollWait = DefaultPollWait
	}
	if o.RestartBackoff <= 0 {
		o.RestartBackoff = DefaultRestartBackoff
	}
	if o.MaxRestartBackoff <= 0 {
		o.MaxRestartBackoff = DefaultMaxRestartBackoff
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = DefaultStopTimeout
	}
}

// Run follows the member's assignment and runs fn in a goroutine for each
// task that is active here, starting from the task's checkpoint. It
// long-polls /assignment and reacts to each change at once:
//
//   - a task that is revoked, or no longer active here, has its context
//     cancelled (cause ErrStopped); once fn returns, Run releases the task;
//   - a task whose epoch changed is stopped and started again at the new
//     epoch;
//   - when the view says shutdown (or its state is done), Run stops every
//     task and returns nil;
//   - a stateful task that appears here as a learner or standby is
//     prepared (RunOptions.Prepare), and its task function gets what the
//     preparation made (Task.Prepared).
//
// When ctx ends, Run stops every task (releasing only revoked ones), waits
// for them and returns nil. Run always waits for every fn it started to
// return, so fn must return soon after its ctx ends. Errors talking to the agent are logged and
// retried; Run does not return them.
func Run(ctx context.Context, c *Client, fn TaskFunc, opts RunOptions) error {
	opts.setDefaults()
	r := &runner{c: c, fn: fn, opts: opts, log: opts.Logger, tasks: map[string]*supervisor{}, exited: make(chan *supervisor), releasedIdle: map[string]uint64{}, lastCommit: map[string]commitPoint{}, preparations: map[string]*preparation{}}
	defer r.bg.Wait() // the preparations' goroutines, after every task has stopped

	pollCtx, cancelPoll := context.WithCancel(ctx)
	views := make(chan api.View)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		r.poll(pollCtx, views)
	}()
	defer func() {
		cancelPoll()
		<-polled
	}()

	for {
		select {
		case <-ctx.Done():
			r.stopAll(false)
			r.waitAll()
			r.discardAll()
			return nil
		case v := <-views:
			if r.apply(ctx, v) {
				r.stopAll(false) // revoked tasks are already stopping with their release
				r.waitAll()
				r.discardAll()
				r.emit(Event{Type: EventShutdown})
				r.log.Info().Msg("the agent says shutdown: every task is stopped")
				return nil
			}
		case s := <-r.exited:
			r.exit(ctx, s)
		}
	}
}

// runner is Run's state; only Run's goroutine touches tasks.
type runner struct {
	c    *Client
	fn   TaskFunc
	opts RunOptions
	log  zerolog.Logger

	tasks   map[string]*supervisor
	exited  chan *supervisor
	closing bool
	// lastCommit is, per task, the epoch, sequence and checkpoint of the
	// last acknowledged commit of the runs that ended.
	lastCommit map[string]commitPoint
	// releasedIdle remembers, per task, the epoch at which a task revoked
	// before this worker ever ran it was released, so that it is released
	// once.
	releasedIdle map[string]uint64
	// preparations are the learners' and standbys' preparations not yet
	// taken by a task function (prepare.go).
	preparations map[string]*preparation
	// bg owns the preparations' goroutines and their disposal; Run waits
	// for it before it returns.
	bg sync.WaitGroup

	emitMu sync.Mutex
}

// commitPoint is where a run's last commit left a task.
type commitPoint struct {
	epoch      uint64
	seq        uint64
	checkpoint []byte
}

func (r *runner) emit(ev Event) {
	if r.opts.OnEvent == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	r.opts.OnEvent(ev)
}

// poll long-polls the assignment and hands each view to Run. The first
// request, and the first after an error, does not wait, so that Run sees
// the current view at once.
func (r *runner) poll(ctx context.Context, views chan<- api.View) {
	var after uint64
	current := false
	failures := 0
	for {
		wait := r.opts.PollWait
		if !current {
			wait = 0
		}
		v, err := r.c.Assignment(ctx, after, wait)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			current = false
			failures++
			// At most 1 s: once the agent answers again, the worker is
			// attached again within a second (docs/api.md).
			d := min(50*time.Millisecond<<min(failures, 10), time.Second)
			r.log.Warn().Err(err).Dur(fieldBackoff, d).Msg("read the assignment; retrying")
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			continue
		}
		failures, current, after = 0, true, v.Version
		select {
		case views <- v:
		case <-ctx.Done():
			return
		}
	}
}

// apply starts and stops tasks to match v and reports whether v says
// shutdown.
func (r *runner) apply(ctx context.Context, v api.View) (shutdown bool) {
	revoked := make(map[string]bool, len(v.Revoke))
	for _, id := range v.Revoke {
		revoked[id] = true
	}
	want := map[string]api.TaskView{}
	var order []string
	for _, tv := range v.Tasks {
		if tv.Role == api.RoleActive && !revoked[tv.ID] {
			want[tv.ID] = tv
			order = append(order, tv.ID)
		}
	}
	for id, s := range r.tasks {
		tv, ok := want[id]
		if s.stopping {
			// Start it again once it has stopped, if it is still ours then.
			s.next = nil
			if ok {
				s.next = &tv
			}
			if revoked[id] {
				s.release.Store(true)
			}
			continue
		}
		switch {
		case revoked[id]:
			r.log.Info().Str(fieldTask, id).Uint64(fieldEpoch, s.tv.Epoch).Msg("task revoked: stopping it")
			s.stop(true)
		case !ok:
			// Moved away without a revoke (failover, or the group's last
			// member leaving): there is nothing to release.
			r.log.Info().Str(fieldTask, id).Uint64(fieldEpoch, s.tv.Epoch).Msg("task no longer active here: stopping it")
			s.stop(false)
		case tv.Epoch != s.tv.Epoch:
			r.log.Info().Str(fieldTask, id).Uint64(fieldEpoch, tv.Epoch).Msg("task epoch changed: restarting it")
			s.stop(false)
			s.next = &tv
		}
	}
	for _, id := range order {
		if _, running := r.tasks[id]; !running {
			r.start(ctx, want[id])
		}
	}
	r.releaseIdle(ctx, v, revoked)
	r.prepareAll(ctx, v, revoked)
	return v.Shutdown || v.State == api.StateDone
}

// releaseIdle releases the revoked tasks this worker never ran (revoked
// before it started them): there is nothing to stop, and the move should
// not wait for the agent's release timeout.
func (r *runner) releaseIdle(ctx context.Context, v api.View, revoked map[string]bool) {
	for _, tv := range v.Tasks {
		if !revoked[tv.ID] || tv.Role != api.RoleActive {
			continue
		}
		if _, running := r.tasks[tv.ID]; running || r.releasedIdle[tv.ID] == tv.Epoch {
			continue
		}
		r.releasedIdle[tv.ID] = tv.Epoch
		rctx, cancel := context.WithTimeout(ctx, r.opts.StopTimeout)
		res, err := r.c.Release(rctx, tv.ID, tv.Epoch)
		cancel()
		if err != nil {
			r.log.Warn().Err(err).Str(fieldTask, tv.ID).Msg("release a revoked task that never ran here; the agent hands it over after its release timeout")
			continue
		}
		r.emit(Event{Type: EventRelease, Task: tv.ID, Epoch: res.Epoch, Seq: res.Seq})
		r.log.Info().Str(fieldTask, tv.ID).Uint64(fieldEpoch, res.Epoch).Msg("released a revoked task that never ran here")
	}
}

// exit forgets a supervisor that ended and starts the task again if the
// view asked for it meanwhile.
func (r *runner) exit(ctx context.Context, s *supervisor) {
	delete(r.tasks, s.tv.ID)
	if s.release.Load() {
		// Released (or being given up) by its supervisor: not again by
		// releaseIdle while later views still list it under revoke.
		r.releasedIdle[s.tv.ID] = s.tv.Epoch
	}
	if seq, cp := s.run.last(); seq > 0 {
		r.lastCommit[s.tv.ID] = commitPoint{epoch: s.tv.Epoch, seq: seq, checkpoint: cp}
	}
	if s.next == nil || r.closing {
		return
	}
	r.start(ctx, *s.next)
}

func (r *runner) stopAll(release bool) {
	r.closing = true
	for _, s := range r.tasks {
		if !s.stopping {
			s.stop(release)
		}
	}
}

func (r *runner) waitAll() {
	for len(r.tasks) > 0 {
		r.exit(context.Background(), <-r.exited)
	}
}

// discardAll discards every preparation: Run is ending.
func (r *runner) discardAll() {
	for id := range r.preparations {
		r.discard(id)
	}
}

func (r *runner) start(ctx context.Context, tv api.TaskView) {
	// A view that starts a task again at the epoch of an earlier run here
	// may have been built while that run was still committing: its last
	// commit is then the newer checkpoint (only this worker commits at this
	// epoch), and resuming from the view's would process input twice. The
	// view's Seq tells: a copy that has applied past that commit (a later
	// commit whose acknowledgement was lost, an activation's marker) holds
	// the newer checkpoint itself.
	if lc, ok := r.lastCommit[tv.ID]; ok && lc.epoch == tv.Epoch && lc.seq > tv.Seq {
		tv.Checkpoint = lc.checkpoint
	}
	stopCtx, stopFn := context.WithCancelCause(context.WithoutCancel(ctx))
	s := &supervisor{
		r:      r,
		tv:     tv,
		ctx:    stopCtx,
		cancel: stopFn,
		run:    &taskRun{stopTimeout: r.opts.StopTimeout, checkpoint: tv.Checkpoint},
		log:    r.log.With().Str(fieldTask, tv.ID).Uint64(fieldEpoch, tv.Epoch).Logger(),
		prep:   r.takePreparation(tv.ID),
	}
	r.tasks[tv.ID] = s
	go func() {
		s.supervise()
		r.exited <- s
	}()
}

// supervisor runs one task at one epoch: fn, its restarts, and the
// release after it stopped.
type supervisor struct {
	r      *runner
	tv     api.TaskView
	ctx    context.Context // ends (cause ErrStopped) when the task must stop
	cancel context.CancelCauseFunc
	run    *taskRun
	log    zerolog.Logger
	// prep is the task's preparation while it was a learner or standby
	// here, for the first run; the supervisor's goroutine takes it.
	prep *preparation

	// Owned by Run's goroutine.
	stopping bool
	next     *api.TaskView
	// release says to release the task once stopped; Run sets it, the
	// supervisor reads it after fn returned.
	release atomic.Bool
}

func (s *supervisor) stop(release bool) {
	s.stopping = true
	if release {
		s.release.Store(true)
	}
	s.cancel(ErrStopped)
}

func (s *supervisor) supervise() {
	tv := s.tv
	failures := 0
	prepared := s.takePrepared()
	for s.ctx.Err() == nil {
		s.r.emit(Event{Type: EventStart, Task: tv.ID, Epoch: tv.Epoch, Checkpoint: tv.Checkpoint})
		s.log.Debug().Msg("task starting")
		started := time.Now()
		err := s.call(Task{ID: tv.ID, Epoch: tv.Epoch, Checkpoint: tv.Checkpoint, Stateful: tv.Stateful, Client: s.r.c, Prepared: prepared, run: s.run})
		prepared = nil // the first run owns it
		if s.ctx.Err() != nil {
			if err != nil && !errors.Is(err, ErrStopped) && !errors.Is(err, context.Canceled) {
				s.log.Warn().Err(err).Msg("task function failed while stopping")
			}
			break
		}
		if isCode(err, api.CodeNotOwner) {
			s.r.emit(Event{Type: EventRefused, Task: tv.ID, Epoch: tv.Epoch, Code: api.CodeNotOwner})
			s.log.Info().Err(err).Msg("the agent says this member is not the task's owner: leaving the task alone")
			<-s.ctx.Done()
			return
		}
		if err == nil {
			s.log.Info().Msg("task function returned: the task stays idle until it is revoked")
			<-s.ctx.Done()
			break
		}
		var backoff time.Duration
		if isCode(err, api.CodeResume) {
			// Not a failure: the agent holds a commit the task function
			// was not told of. Restart at once from the checkpoint that
			// includes it.
			s.log.Info().Err(err).Msg("the agent holds a newer checkpoint: restarting the task from it")
		} else {
			if time.Since(started) > s.r.opts.MaxRestartBackoff {
				failures = 0 // it ran well for a while: this is a new failure
			}
			failures++
			backoff = min(s.r.opts.RestartBackoff<<min(failures-1, 20), s.r.opts.MaxRestartBackoff)
			s.log.Warn().Err(err).Dur(fieldBackoff, backoff).Msg("task function failed: restarting it from its latest checkpoint")
		}
		s.r.emit(Event{Type: EventRestart, Task: tv.ID, Epoch: tv.Epoch, Err: err, Backoff: backoff})
		timer := time.NewTimer(backoff)
		select {
		case <-s.ctx.Done():
			timer.Stop()
		case <-timer.C:
			tv.Checkpoint = s.latestCheckpoint(tv)
		}
	}
	if prepared != nil {
		s.r.dispose(tv.ID, prepared) // stopped before its first run
	}
	seq, checkpoint := s.run.last()
	s.r.emit(Event{Type: EventStop, Task: tv.ID, Epoch: tv.Epoch, Seq: seq, Checkpoint: checkpoint})
	s.log.Debug().Msg("task stopped")
	if s.release.Load() {
		s.doRelease()
	}
}

// call runs fn, turning a panic into an error so that one task's bug does
// not take the worker's other tasks down.
func (s *supervisor) call(t Task) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("task function panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return s.r.fn(s.ctx, t)
}

// latestCheckpoint asks the agent for the task's checkpoint. While the agent
// shows the task as a learner at this epoch, it is being activated again
// (its copy missed a commit and is catching up), and the checkpoint it will
// show once active may be newer than any acknowledged here: wait for it.
// The agent's checkpoint is the only one to trust: the run that failed may
// have made a commit it was not told of (a 409 resume, a commit that timed
// out), which the last checkpoint acknowledged here does not include, so a
// read that fails is retried, with a backoff of at most a second, until the
// agent answers or the task is stopped (then the last checkpoint committed
// here is returned, for the stop event alone).
func (s *supervisor) latestCheckpoint(tv api.TaskView) []byte {
	_, last := s.run.last()
	var after uint64
	failures := 0
	for {
		v, err := s.r.c.Assignment(s.ctx, after, s.r.opts.PollWait)
		if s.ctx.Err() != nil {
			return last // stopped: the supervisor does not start the task again
		}
		if err != nil {
			failures++
			d := min(50*time.Millisecond<<min(failures, 10), time.Second)
			s.log.Warn().Err(err).Dur(fieldBackoff, d).Msg("read the task's checkpoint; retrying")
			after = 0
			select {
			case <-s.ctx.Done():
				return last
			case <-time.After(d):
			}
			continue
		}
		failures = 0
		i := slices.IndexFunc(v.Tasks, func(t api.TaskView) bool { return t.ID == tv.ID && t.Epoch == tv.Epoch })
		if i < 0 {
			return last // the task left: the runner stops this supervisor
		}
		switch v.Tasks[i].Role {
		case api.RoleActive:
			return v.Tasks[i].Checkpoint
		case api.RoleLearner:
			after = v.Version
		default:
			return last
		}
	}
}

// doRelease releases the stopped task, retrying while the agent is
// unreachable or unavailable, for up to StopTimeout.
func (s *supervisor) doRelease() {
	ctx, cancel := context.WithTimeout(context.Background(), s.r.opts.StopTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		res, err := s.r.c.Release(ctx, s.tv.ID, s.tv.Epoch)
		if err == nil {
			s.r.emit(Event{Type: EventRelease, Task: s.tv.ID, Epoch: res.Epoch, Seq: res.Seq})
			s.log.Info().Uint64("seq", res.Seq).Msg("task released")
			return
		}
		if isCode(err, api.CodeNotRevoked, api.CodeUnknownTask, api.CodeNotOwner) {
			// The task left without a revoke (moved after a failure); there
			// is nothing to hand over from here.
			s.log.Info().Err(err).Msg("release not needed")
			return
		}
		d := min(25*time.Millisecond<<min(attempt, 6), time.Second)
		s.log.Warn().Err(err).Dur(fieldBackoff, d).Msg("release the task; retrying")
		select {
		case <-ctx.Done():
			s.log.Error().Err(err).Msg("gave up releasing the task; the agent hands it over after its release timeout")
			return
		case <-time.After(d):
		}
	}
}

// Package restore replays a task's changelog into the local store: from the
// store's applied sequence to the end, or on and on while the member is a
// learner or a standby (tailing), reporting its progress as it goes. When
// the store has nothing of the task, or the changelog was trimmed past its
// copy, it loads the task's snapshot first (startpoint.go).
package restore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/snapshot"
	"github.com/handoffhq/handoff/statestore"
)

// Defaults of Options.
const (
	DefaultMaxBatchBytes    = 4 << 20
	DefaultPullMaxBytes     = 16 << 20
	DefaultProgressInterval = 250 * time.Millisecond
	// MaxFlushDelay bounds how long an applied-to-be message waits in the
	// batch: a tailer's store trails the changelog by at most this much.
	MaxFlushDelay = 20 * time.Millisecond
)

// Log field names.
const (
	logTask = "task"
	logSeq  = "seq"
)

// ErrStopped is wrapped by WaitApplied's error when Run returned without
// error before reaching the sequence (at a release entry, or cancelled).
var ErrStopped = errors.New("restore: replayer stopped")

// Commit returns e, the changelog message at seq, as the store commit that
// applies it. It shares e's memory: changelog.KV and statestore.KV are one
// type, so the puts pass as they are.
func Commit(e changelog.Entry, seq uint64) statestore.Commit {
	return statestore.Commit{Seq: seq, Epoch: e.Epoch, Checkpoint: e.Checkpoint, Puts: e.Puts, Deletes: e.Deletes}
}

// Options configure a Replayer.
type Options struct {
	Task string
	// Tail keeps Run following the subject after it reached its end, as a
	// learner or a standby does, until its context ends.
	Tail bool
	// EndWithin, without Tail, ends Run once at most EndWithin messages
	// remain to apply, instead of none: a learner's catch-up that is
	// within the acceptable lag hands the rest to its tail (which reads on
	// a connection and in slots of its own), since its task may be handed
	// over to it at any moment and the rest is then on the pause's path.
	EndWithin uint64
	// MaxBatchBytes is how many bytes of changelog messages Run gathers
	// into one store batch before it applies them; 0 means
	// DefaultMaxBatchBytes, or less on a store that takes smaller batches
	// (statestore.Store.BatchBytes: a small disk). Run also applies what it has when it reaches
	// the end of the subject and at most MaxFlushDelay after a message came.
	MaxBatchBytes int
	// PullMaxBytes bounds, in bytes, what the consumer buffers; 0 means
	// DefaultPullMaxBytes. A bound by message count would let large
	// messages trip the server's slow-consumer limit. It must exceed the
	// largest message (the server's max payload).
	PullMaxBytes int
	// ProgressInterval is the least time between two OnProgress calls,
	// except that reaching the end and returning always report; 0 means
	// DefaultProgressInterval.
	ProgressInterval time.Duration
	// OnProgress, if set, is called from Run's goroutine with Run's
	// progress. It must not block long: Run waits for it.
	OnProgress func(Progress)
	Logger     zerolog.Logger
	// Snapshots, if set, is the group's snapshot bucket: Run loads a
	// snapshot when the store has nothing of the task or when the
	// changelog was trimmed past its copy (see startpoint.go).
	Snapshots *snapshot.Bucket
	// Limiter, if set, bounds how many Replayers work at once (see
	// Limiter).
	Limiter *Limiter
	// Urgent, if set, says whether the Replayer's next step goes ahead of
	// the Limiter's holds (it still takes a slot): a task's own catch-up
	// while the task is being handed over to this member.
	Urgent func() bool
	// Member, if set, is the member this Replayer runs on: a release entry
	// that names it as the task's successor stops Run, with everything
	// before the entry applied and the entry itself not, and Run returns
	// it (Result.Release), tailing or not. Whether the member takes the
	// task over from it is the caller's decision, and so is applying the
	// entry (Release.Commit). Release entries that name another member are
	// applied as they come.
	Member string
	// History is what the group's records say about the task's past: a
	// task with one whose state is nowhere to be found stops Run with
	// ErrLost instead of starting empty (history.go).
	History History
}

// Release is a release entry as a Replayer receives it: the task's owner
// handed it over to Successor at Epoch.
type Release struct {
	Seq       uint64
	Epoch     uint64
	Successor string
	// Stored is when the server stored the entry, Received when the
	// consumer delivered it (Run returns it once what precedes it is
	// applied).
	Stored, Received time.Time
	// Last says that nothing followed the entry on the subject when it was
	// delivered: a successor that takes over from it is the only writer
	// since.
	Last bool
}

// Commit is the store commit that applies the entry: no data, and the
// successor's epoch.
func (rel Release) Commit() statestore.Commit {
	return Commit(changelog.Entry{Kind: changelog.KindRelease, Epoch: rel.Epoch, Successor: rel.Successor}, rel.Seq)
}

// Ending is why a Run that returned no error ended.
type Ending uint8

const (
	// CaughtUp: without Tail, Run applied everything that was on the
	// subject when it reached the end (or all but EndWithin messages).
	CaughtUp Ending = iota + 1
	// Cancelled: a tailing Run's context ended. (A Run without Tail
	// returns its context's error instead.)
	Cancelled
	// AtRelease: Run met a release entry that names Options.Member; it is
	// in Result.Release, not applied.
	AtRelease
)

var endingNames = [...]string{CaughtUp: "caught up", Cancelled: "cancelled", AtRelease: "at a release entry"}

func (e Ending) String() string {
	if int(e) < len(endingNames) && endingNames[e] != "" {
		return endingNames[e]
	}
	return fmt.Sprintf("ending(%d)", uint8(e))
}

// Result is how a Run that returned no error ended.
type Result struct {
	Ending Ending
	// Release is the entry Run stopped at when Ending is AtRelease.
	Release Release
}

// Progress is how far a Replayer has come.
type Progress struct {
	Task string
	// Applied is the stream sequence of the last message applied and
	// flushed to the store; End the last sequence Run knows to be on the
	// subject. End may trail the subject's true end while messages are
	// still to come; LagMsgs is exact.
	Applied, End uint64
	// LagMsgs is how many messages are still to apply: exact as of the last
	// message received (the server's pending count, plus what was received
	// but not flushed). LagBytes estimates their size as the average size
	// of the messages this run received times LagMsgs (0 before the first).
	LagMsgs, LagBytes uint64
	// Rate and ByteRate are messages and bytes applied per second over the
	// last few seconds.
	Rate, ByteRate float64
	// Records counts puts and deletes applied by this run.
	Records uint64
	// Replayed and ReplayedBytes count messages and their bytes applied by
	// this run.
	Replayed, ReplayedBytes uint64
	// ETA is LagMsgs at the current Rate; 0 when caught up or unknown.
	ETA time.Duration
	// Started is when Run began reading the changelog. It is zero until
	// Run's first report, and such a progress says nothing of the lag
	// (see Reported).
	Started time.Time
	// CaughtUp is LagMsgs == 0 at the time of the report.
	CaughtUp bool
}

// Reported tells whether p comes from a report of Run: a Replayer's
// progress before that (Run not started, or loading a snapshot) has a zero
// lag that must not be read as caught up.
func (p Progress) Reported() bool { return !p.Started.IsZero() }

// Replayer replays one task's changelog into a store. Run it once; its other
// methods are safe from any goroutine.
type Replayer struct {
	log    *changelog.Log
	store  *statestore.Store
	opts   Options
	logger zerolog.Logger

	mu       sync.Mutex
	progress Progress
	changed  chan struct{} // closed and replaced when progress changes
	running  bool
	done     bool
	runErr   error
	loaded   snapshot.Info // the snapshot Run loaded, if any

	// wanted is the highest sequence a WaitApplied call waits for; Run
	// applies a batch at once when it holds that sequence, instead of
	// after MaxFlushDelay. nudge tells Run that wanted rose.
	wanted atomic.Uint64
	nudge  chan struct{}
}

// New returns a Replayer of opts.Task's changelog in log into store.
func New(log *changelog.Log, store *statestore.Store, opts Options) *Replayer {
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = min(DefaultMaxBatchBytes, store.BatchBytes())
	}
	if opts.PullMaxBytes <= 0 {
		opts.PullMaxBytes = DefaultPullMaxBytes
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = DefaultProgressInterval
	}
	return &Replayer{
		log:      log,
		store:    store,
		opts:     opts,
		logger:   opts.Logger.With().Str(logTask, opts.Task).Logger(),
		progress: Progress{Task: opts.Task},
		changed:  make(chan struct{}),
		nudge:    make(chan struct{}, 1),
	}
}

// Limit makes r work in l's slots; call it before Run.
func (r *Replayer) Limit(l *Limiter) { r.opts.Limiter = l }

// EndWithin sets Options.EndWithin; call it before Run.
func (r *Replayer) EndWithin(n uint64) { r.opts.EndWithin = n }

// Progress returns the latest progress.
func (r *Replayer) Progress() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.progress
}

// WaitApplied returns nil once the store has applied (and flushed) the
// task's changelog up to seq. It returns early with an error when Run has
// returned first (wrapping Run's error, or ErrStopped), or with ctx.Err().
func (r *Replayer) WaitApplied(ctx context.Context, seq uint64) error {
	r.mu.Lock()
	running := r.running && !r.done
	r.mu.Unlock()
	if !running {
		// Nothing is applying: the store answers. (While Run runs, its
		// progress does, so that Progress agrees once this returns.)
		if m, _, err := r.store.Meta(r.opts.Task); err == nil && m.Applied >= seq {
			return nil
		}
	}
	// Ask Run to apply seq as soon as it has it.
	for w := r.wanted.Load(); w < seq && !r.wanted.CompareAndSwap(w, seq); w = r.wanted.Load() {
	}
	select {
	case r.nudge <- struct{}{}:
	default:
	}
	for {
		r.mu.Lock()
		applied, changed, done, runErr := r.progress.Applied, r.changed, r.done, r.runErr
		r.mu.Unlock()
		if applied >= seq {
			return nil
		}
		if done {
			if runErr == nil {
				runErr = ErrStopped
			}
			return fmt.Errorf("wait for task %s to apply seq %d: stopped at seq %d: %w", r.opts.Task, seq, applied, runErr)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// publish stores p as the latest progress and wakes waiters.
func (r *Replayer) publish(p Progress) {
	r.mu.Lock()
	r.progress = p
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Run replays the task's changelog from the store's applied sequence + 1,
// or from a snapshot it loads first (see startpoint.go), and says how it
// ended. Without Tail it ends, CaughtUp, once it has applied everything that
// was on the subject when it reached the end; with Tail it keeps applying
// new messages until ctx ends (Cancelled). With Member set, a release entry
// that names it ends Run either way (AtRelease), before the entry is
// applied. A message that does not decode stops Run with an error naming
// the task and sequence; nothing of it is applied, and everything before it
// is. A changelog trimmed past the copy stops Run with an error wrapping
// ErrGap unless a snapshot bridges it. Cancelling ctx of a Run without Tail
// returns ctx's error; what was received is applied first either way.
func (r *Replayer) Run(ctx context.Context) (res Result, err error) {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return Result{}, fmt.Errorf("restore task %s: Run called twice", r.opts.Task)
	}
	r.running = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.done, r.runErr = true, err
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}()

	for attempt := 1; ; attempt++ {
		if err := r.prepare(ctx); err != nil {
			return Result{}, err
		}
		if err := r.checkHistory(ctx); err != nil {
			return Result{}, err
		}
		run, err := r.start(ctx)
		if err != nil {
			return Result{}, err
		}
		res, err = run.loop(ctx)
		run.stop()
		if !r.restartOnGap(ctx, err, attempt) {
			return res, err
		}
	}
}

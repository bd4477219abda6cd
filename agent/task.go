package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/statestore"
)

// task is one task's whole runtime on this member: its place in the
// lifecycle and everything that goes with it. Every change of phase goes
// through Agent.apply (lifecycle.go), which owns its side effects; the
// commit path and the release path read the state under mu. At most one
// background job (a tailing restore or an activation) runs for it at a
// time, each waiting for the one before. A task this member holds a local
// copy of but no role for stays in the agent's tasks, gone, so that its
// position is reported.
type task struct {
	id       string
	stateful bool

	// commitMu serializes the worker's commits and release, and guards
	// lastSeq; it is taken before a.mu and mu.
	commitMu sync.Mutex
	lastSeq  uint64 // changelog sequence of this owner's last append or applied entry

	// mu guards the state below; it is held only briefly, never across
	// I/O. Lock order (docs/ARCHITECTURE.md): commitMu, a.mu, then mu.
	mu     sync.Mutex
	phase  taskPhase // see lifecycle.go
	epoch  uint64
	revoke *revokeOrder // the current generation revokes the task from this member
	// release is this member's release of the task, in its record while
	// the group needs to see it; forWorker says the agent made it for its
	// lost worker.
	release   *assign.Release
	forWorker bool
	// takeover is a direct takeover of the task, in the member record
	// until a generation records it.
	takeover *assign.Takeover
	job      *job
	// cache is the task's record cache while it is active here (phase
	// active), nil otherwise or with the caches off: made and dropped by
	// apply as the task enters and leaves that phase.
	cache *recordCache

	applied  atomic.Uint64 // how far the local copy reaches
	lag      atomic.Uint64 // learner or standby lag in messages
	replayer atomic.Pointer[restore.Replayer]
}

// job is a task's background goroutine (startJobLocked, lifecycle.go).
type job struct {
	cancel context.CancelFunc
	done   chan struct{}
	// tookOver, read once done is closed, says that the job took the task
	// over from a release entry that named this member: an activation that
	// waited for this tailer has nothing left to do.
	tookOver bool
}

func (j *job) stop() {
	if j != nil {
		j.cancel()
	}
}

func (j *job) wait() {
	if j != nil {
		<-j.done
	}
}

func (t *task) position() uint64 { return t.applied.Load() }

// replayPullBytes bounds what each restore buffers. A member may run a
// dozen restores at once on its replay connection, and the server drops a
// connection whose pending data passes 64 MiB.
const replayPullBytes = 4 << 20

// tailPullBytes bounds what a tailer buffers: the largest message the
// server takes and room for its headers. The tail connection carries every
// tailer of the member, and a release entry waits in its socket behind what
// the others' pulls buffered there.
func tailPullBytes(nc *nats.Conn) int { return int(nc.MaxPayload()) + 64<<10 }

// tail keeps a learner's or standby's copy current until ctx ends, or
// until it meets a release entry that names this member and takes the task
// over from it (takeOver), which it reports. It catches up on the replay
// connection, in the learners' slots, until it is within the acceptable
// lag, then follows the changelog on the tail connection (replayconn.go): a
// copy within the acceptable lag may be handed the task at any moment, and
// what it still has to apply is then on the pause's path, where it must not
// queue behind other restores.
func (a *Agent) tail(ctx context.Context, t *task) (tookOver bool) {
	for ctx.Err() == nil {
		r := a.newReplayer(t, a.replays, false, true, restore.History{})
		r.Limit(a.learnerLimit)               // a catch-up that nobody waits for yet
		r.EndWithin(a.config().AcceptableLag) // from there on, one may
		res, reconnected, err := a.runRestore(ctx, r, a.replays)
		if err == nil && !reconnected && res.Ending == restore.CaughtUp {
			if a.handedOverOnceCaughtUp(t) {
				a.incoming.expecting(t.id)
			}
			r = a.newReplayer(t, a.tails, true, true, restore.History{})
			res, reconnected, err = a.runRestore(ctx, r, a.tails)
		}
		if ctx.Err() != nil {
			return false
		}
		if reconnected {
			continue // afresh, from what the store has applied
		}
		if err == nil && res.Ending == restore.AtRelease {
			if a.takeOver(t, res.Release) {
				return true
			}
			err = a.applyRelease(t, res.Release) // and tail on from it
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, statestore.ErrFull) { // the store logs its full disk
			a.log.Error().Err(err).Str(fTask, t.id).Msg("tailing restore failed; retrying")
		}
		if !group.Sleep(ctx, time.Second) {
			return false
		}
	}
	return false
}

// handedOverOnceCaughtUp reports whether t, which has just caught up, is a
// learner the leader revokes to this member at once: in eager mode.
func (a *Agent) handedOverOnceCaughtUp(t *task) bool {
	t.mu.Lock()
	learner := t.phase == phaseLearner
	t.mu.Unlock()
	return learner && a.config().Handover == assign.Eager
}

// applyRelease applies a release entry that names this member to t's copy:
// one it took the task over from, or one it did not, so that its copy goes
// on past it.
func (a *Agent) applyRelease(t *task, rel restore.Release) error {
	if err := a.store.Apply(t.id, rel.Commit()); err != nil {
		return fmt.Errorf("apply the release entry of task %s at seq %d: %w", t.id, rel.Seq, err)
	}
	return nil
}

// activate makes this member the task's active owner at epoch: it waits
// for the previous owner's last commit, then appends the epoch marker fenced
// on what the store has applied, catching up first whenever the fence says
// the copy is behind. Only then may the worker commit. An activation that
// meets a release entry naming this member at its epoch (its tailer's, or
// its own catch-up's: the leader recorded a direct hand-off before this
// member's tailer saw the entry) takes the task over from it, as the tailer
// would have, and appends no marker; it reports whether it did.
func (a *Agent) activate(ctx context.Context, t *task, prev *job, epoch, handoffSeq uint64, handoffAt time.Time) (tookOver bool) {
	var took activationTimes
	if prev != nil {
		// A tailer that is current applies the previous owner's last
		// commit within moments; a new consumer would cost more.
		t0 := time.Now()
		if r := t.replayer.Load(); r != nil && handoffSeq > 0 {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = r.WaitApplied(wctx, handoffSeq) // on failure the fenced loop below catches up
			cancel()
		}
		t1 := time.Now()
		prev.stop()
		prev.wait()
		took.waitTailer, took.stopTailer = t1.Sub(t0), time.Since(t1)
		if prev.tookOver {
			return true // from the previous owner's release entry
		}
	}
	if !t.stateful {
		a.markReady(ctx, t, epoch, 0, 0, handoffAt, took)
		return false
	}
	var replayed uint64 // messages this activation had to replay itself
	hist, lost := a.taskHistory(ctx, t.id, epoch, handoffSeq), false
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if err := a.store.Writable(); errors.Is(err, statestore.ErrFull) {
			// The store logs its full disk; append no marker it cannot apply.
			group.Sleep(ctx, time.Second)
			continue
		}
		meta, _, err := a.store.Meta(t.id)
		if err != nil {
			a.log.Error().Err(err).Str(fTask, t.id).Msg("read task meta; retrying")
			group.Sleep(ctx, time.Second)
			continue
		}
		if handoffSeq > meta.Applied || attempt > 0 || (meta.Applied == 0 && hist.Known()) {
			t0 := time.Now()
			n, res, err := a.catchUpCount(ctx, t, true, hist)
			took.catchUp += time.Since(t0)
			replayed += n
			if err == nil && res.Ending == restore.AtRelease {
				if a.takeOver(t, res.Release) {
					a.metrics.activationReplayed.Add(float64(replayed))
					return true
				}
				err = a.applyRelease(t, res.Release)
				if err == nil {
					continue // catch up past it
				}
			}
			if errors.Is(err, restore.ErrLost) {
				if !lost {
					a.stateLost(t, epoch, err)
					lost = true
				}
				group.Sleep(ctx, lostRetry)
				continue
			}
			if err != nil {
				if ctx.Err() == nil {
					if !errors.Is(err, statestore.ErrFull) { // the store logs its full disk
						a.log.Error().Err(err).Str(fTask, t.id).Msg("catch up before activation failed; retrying")
					}
					group.Sleep(ctx, time.Second)
				}
				continue
			}
			if meta, _, err = a.store.Meta(t.id); err != nil {
				a.log.Error().Err(err).Str(fTask, t.id).Msg("read task meta after catching up; retrying")
				group.Sleep(ctx, time.Second)
				continue
			}
		}
		if meta.Epoch > epoch {
			// A newer owner has written: this ownership is stale. Never
			// append a marker below the log's epoch, or it would fence the
			// rightful owner.
			a.markLost(t, epoch, meta.Epoch)
			return false
		}
		t0 := time.Now()
		seq, err := a.clog.Append(ctx, t.id, meta.Applied, changelog.Entry{Kind: changelog.KindEpoch, Epoch: epoch})
		took.append += time.Since(t0)
		if errors.Is(err, changelog.ErrFenced) {
			continue // the subject moved on: catch up and try again
		}
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn().Err(err).Str(fTask, t.id).Msg("append epoch marker failed; retrying")
				group.Sleep(ctx, 250*time.Millisecond)
			}
			continue
		}
		t0 = time.Now()
		err = a.store.Apply(t.id, statestore.Commit{Seq: seq, Epoch: epoch})
		took.apply += time.Since(t0)
		if err != nil {
			// The marker is in the changelog; the next attempt replays it.
			a.log.Error().Err(err).Str(fTask, t.id).Msg("apply epoch marker; replaying")
			group.Sleep(ctx, 250*time.Millisecond)
			continue
		}
		a.markReady(ctx, t, epoch, seq, replayed, handoffAt, took)
		return false
	}
	return false
}

// catchUp replays the task's changelog to its end.
func (a *Agent) catchUp(ctx context.Context, t *task) error {
	_, _, err := a.catchUpCount(ctx, t, false, restore.History{})
	return err
}

// catchUpCount is catchUp that also says how many messages it applied,
// refusing (restore.ErrLost) a task with history hist whose state is gone;
// with atRelease it stops at a release entry that names this member, and
// says so (restore.AtRelease).
func (a *Agent) catchUpCount(ctx context.Context, t *task, atRelease bool, hist restore.History) (uint64, restore.Result, error) {
	var replayed uint64
	for {
		r := a.newReplayer(t, a.replays, false, atRelease, hist)
		res, reconnected, err := a.runRestore(ctx, r, a.replays)
		replayed += r.Progress().Replayed
		if err == nil || !reconnected || ctx.Err() != nil {
			return replayed, res, err
		}
	}
}

// runRestore runs r until it ends, ctx ends, or rc, the connection it
// reads on, comes back, and reports how it ended and whether that
// reconnect ended it. A restore can wait on NATS with no deadline (a
// consumer that has not noticed its server restarted, a snapshot listing
// whose watcher lost its server), so a reconnect ends it and the caller
// starts a fresh one from what the store has applied, as the watch loops
// watch afresh.
func (a *Agent) runRestore(ctx context.Context, r *restore.Replayer, rc *replayConn) (res restore.Result, reconnected bool, err error) {
	back := rc.back.round()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(back, cancel)
	res, err = r.Run(rctx)
	stop()
	if back.Err() != nil {
		// Cut by the reconnect: a tailing Run ends cancelled, one to the
		// end with the context's error. A Run that ended otherwise keeps
		// its ending and its error.
		cut := err == nil && res.Ending == restore.Cancelled || errors.Is(err, context.Canceled)
		return res, cut && ctx.Err() == nil, err
	}
	return res, false, err
}

// newReplayer returns a replay of t's changelog on rc, tailing or to the
// end, that reports its progress, and makes it t's current one. With
// atRelease (a learner's, a standby's, an activation's) it stops at a
// release entry that names this member, for its caller to decide whether
// this member takes the task over. hist is what the group's records say of
// the task's past.
func (a *Agent) newReplayer(t *task, rc *replayConn, tail, atRelease bool, hist restore.History) *restore.Replayer {
	pull := replayPullBytes
	if tail {
		pull = tailPullBytes(rc.nc)
	}
	o := restore.Options{
		Task:         t.id,
		Tail:         tail,
		PullMaxBytes: pull,
		OnProgress:   func(p restore.Progress) { a.onProgress(t, p) },
		Logger:       a.log,
		Snapshots:    rc.snaps,
		History:      hist,
		// The task's own catch-up goes on while it is handed over here.
		Urgent: func() bool { return a.incoming.has(t.id) },
	}
	if atRelease {
		o.Member = a.opts.MemberID
	}
	r := restore.New(rc.log, a.store, o)
	t.replayer.Store(r)
	return r
}

// markReady lets the worker use the task, unless the activation was
// cancelled meanwhile. replayed is how many changelog messages the
// activation itself had to apply: a planned move that finds its learner
// current replays none, so the log line shows whether a task paused for a
// restore.
func (a *Agent) markReady(ctx context.Context, t *task, epoch, seq, replayed uint64, handoffAt time.Time, took activationTimes) {
	fenced := time.Now()
	l := a.lockTasks(true, t)
	ok := ctx.Err() == nil && t.phase.owned() && t.epoch == epoch && a.apply(t, change{ev: evReady, seq: seq})
	l.unlock() // the worker's view is bumped: its long-poll should not wait for the log
	if !ok {
		return
	}
	planned := !handoffAt.IsZero()
	if planned {
		a.metrics.handoffPause.Observe(time.Since(handoffAt).Seconds())
	}
	a.metrics.activationReplayed.Add(float64(replayed))
	a.log.Info().Str(fTask, t.id).Uint64(fEpoch, epoch).Uint64(fSeq, seq).
		Uint64("replayed", replayed).Bool("planned", planned).Str(fFenced, stamp(fenced)).
		Dur("waitTailer", took.waitTailer).Dur("stopTailer", took.stopTailer).Dur("catchUp", took.catchUp).
		Dur("append", took.append).Dur("apply", took.apply).Msg("task active")
}

// activationTimes are how long an activation's steps took, for the log
// line of the task's activation: waiting for the tailer to apply the old
// owner's last commit, stopping it, catching up (when the fence said the
// copy was behind), appending the epoch marker, applying it.
type activationTimes struct {
	waitTailer, stopTailer, catchUp, append, apply time.Duration
}

// markLost records that the task's changelog has moved past this member's
// ownership.
func (a *Agent) markLost(t *task, epoch, logEpoch uint64) {
	a.lose(t, epoch)
	a.log.Warn().Str(fTask, t.id).Uint64(fEpoch, epoch).Uint64("logEpoch", logEpoch).
		Msg("task is owned at a newer epoch; not activating")
}

// lose marks the task as no longer this member's to write at epoch.
func (a *Agent) lose(t *task, epoch uint64) {
	l := a.lockTasks(false, t)
	defer l.unlock()
	if t.epoch == epoch {
		a.apply(t, change{ev: evLose})
	}
}

// onProgress records a restore's progress and publishes it for the leader.
// A task that has left this member reports nothing more.
func (a *Agent) onProgress(t *task, p restore.Progress) {
	t.mu.Lock()
	role := t.phase.role()
	t.mu.Unlock()
	t.applied.Store(p.Applied)
	t.lag.Store(p.LagMsgs)
	if role == "" {
		return
	}
	a.metrics.learnerLag.WithLabelValues(t.id).Set(float64(p.LagMsgs))
	a.metrics.restoreRate.WithLabelValues(t.id).Set(p.Rate)
	a.mu.Lock()
	gen := a.generation
	a.mu.Unlock()
	a.publishProgress(group.Progress{
		LearnerProgress: api.LearnerProgress{
			Member:   a.opts.MemberID,
			Task:     t.id,
			Role:     role,
			Applied:  p.Applied,
			End:      p.End,
			Lag:      p.LagMsgs,
			LagBytes: p.LagBytes,
			Replayed: p.Replayed,
			Rate:     p.Rate,
			ETA:      p.ETA,
			Updated:  time.Now(),
		},
		Generation: gen,
	})
}

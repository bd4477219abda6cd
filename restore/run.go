package restore

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/statestore"
)

// consumerBuffer is how many received messages wait between the consumer's
// goroutine and Run's. The consumer buffers up to PullMaxBytes on top.
const consumerBuffer = 256

// stopTimeout bounds the wait for the consumer to stop at the end of Run.
const stopTimeout = 5 * time.Second

// run is the state of one Run, owned by Run's goroutine.
type run struct {
	r    *Replayer
	task string

	cc     jetstream.ConsumeContext // nil when there is nothing to consume
	msgs   chan delivered
	stopCh chan struct{}

	dec          changelog.Decoder
	pending      []statestore.Commit
	pendingBytes int
	pendingRecs  uint64
	flushTimer   *time.Timer
	flushArmed   bool

	applied     uint64 // last sequence flushed to the store
	received    uint64 // last sequence received
	numPending  uint64 // the server's pending count at the last message received
	end         uint64
	recvMsgs    uint64 // messages received by this run, for the average size
	recvBytes   uint64
	replayed    uint64
	replayBytes uint64
	records     uint64
	started     time.Time
	rate        rateWindow

	reportTimer *time.Timer
	reportArmed bool
	lastReport  time.Time
	reportedEnd bool     // the last report was caught up
	finished    bool     // without Tail: reached the end
	atRelease   *Release // the release entry naming Options.Member that ends the run
}

// start reads where the store is, learns the subject's end and starts the
// consumer right after the store's applied sequence.
func (r *Replayer) start(ctx context.Context) (*run, error) {
	task := r.opts.Task
	meta, _, err := r.store.Meta(task)
	if err != nil {
		return nil, fmt.Errorf("restore task %s: %w", task, err)
	}
	end, err := r.log.Last(ctx, task)
	if err != nil {
		return nil, fmt.Errorf("restore task %s: %w", task, err)
	}
	now := time.Now()
	u := &run{
		r:           r,
		task:        task,
		applied:     meta.Applied,
		received:    meta.Applied,
		end:         max(end, meta.Applied),
		started:     now,
		flushTimer:  stoppedTimer(),
		reportTimer: stoppedTimer(),
	}
	u.rate.reset(now)
	if end <= meta.Applied {
		u.numPending = 0
		if !r.opts.Tail {
			u.finished = true
			return u, nil
		}
	}

	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{r.log.Subject(task)}, InactiveThreshold: changelog.ConsumerInactive}
	if meta.Applied > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = meta.Applied + 1
	}
	cons, err := r.log.Stream().OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("restore task %s from seq %d: create consumer: %w", task, meta.Applied+1, err)
	}
	u.msgs = make(chan delivered, consumerBuffer)
	u.stopCh = make(chan struct{})
	u.cc, err = cons.Consume(u.deliver,
		jetstream.PullMaxBytes(r.opts.PullMaxBytes),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			// The ordered consumer recovers by itself (server restarts,
			// missed heartbeats); Run keeps waiting for messages.
			r.logger.Warn().Err(err).Msg("changelog consumer")
		}))
	if err != nil {
		return nil, fmt.Errorf("restore task %s from seq %d: consume: %w", task, meta.Applied+1, err)
	}
	if info := cons.CachedInfo(); info != nil {
		u.numPending = info.NumPending // exact lag before the first message arrives
		// Nothing to deliver after all (the subject's tail was removed
		// between Last and now): don't wait for a message that won't come.
		u.finished = info.NumPending <= r.opts.EndWithin && !r.opts.Tail
	} else if end > meta.Applied {
		u.numPending = 1 // at least one message; refined by the first one
	}
	return u, nil
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// delivered is a message the consumer delivered, and when.
type delivered struct {
	msg jetstream.Msg
	at  time.Time
}

// deliver runs on the consumer's goroutine: it hands msg to Run's.
func (u *run) deliver(msg jetstream.Msg) {
	select {
	case u.msgs <- delivered{msg, time.Now()}:
	case <-u.stopCh:
	}
}

// stop stops the consumer and waits (bounded) for it to stop delivering,
// unless the run stopped at a release entry: its caller is about to take
// the task over, and must not wait for the consumer's goroutine to be
// scheduled first. That goroutine only hands messages to this run, and
// deliver returns at once once stopCh is closed, so it ends by itself.
func (u *run) stop() {
	u.flushTimer.Stop()
	u.reportTimer.Stop()
	if u.cc == nil {
		return
	}
	close(u.stopCh)
	u.cc.Stop()
	if u.atRelease != nil {
		return
	}
	select {
	case <-u.cc.Closed():
	case <-time.After(stopTimeout):
		u.r.logger.Warn().Msg("changelog consumer did not stop in time")
	}
}

func (u *run) loop(ctx context.Context) (res Result, err error) {
	defer func() {
		if ferr := u.flush(); err == nil {
			err = ferr
		}
		u.report(true)
	}()
	u.report(true) // where Run starts
	for !u.finished && u.atRelease == nil {
		// A cancelled context wins over messages ready at the same time.
		if ctx.Err() != nil {
			return u.cancelled(ctx)
		}
		select {
		case d := <-u.msgs:
			if err := u.limited(ctx, func() error { return u.add(d.msg, d.at) }); err != nil {
				return Result{}, err
			}
		case <-u.flushTimer.C:
			u.flushArmed = false
			if err := u.limited(ctx, u.flush); err != nil {
				return Result{}, err
			}
		case <-u.r.nudge:
			// A waiter (an activation) wants a sequence: apply it now if
			// it has come.
			if w := u.r.wanted.Load(); w > u.applied && u.received >= w {
				if err := u.limited(ctx, u.flush); err != nil {
					return Result{}, err
				}
			}
		case <-u.reportTimer.C:
			u.reportArmed = false
			u.report(true)
		case <-ctx.Done():
			return u.cancelled(ctx)
		}
	}
	if u.atRelease != nil {
		return Result{Ending: AtRelease, Release: *u.atRelease}, nil
	}
	return Result{Ending: CaughtUp}, nil
}

// limited runs fn in a slot of the Replayer's Limiter; it returns the
// cancelled run's error when ctx ends first.
func (u *run) limited(ctx context.Context, fn func() error) error {
	urgent := u.r.opts.Urgent != nil && u.r.opts.Urgent()
	if !u.r.opts.Limiter.acquire(ctx, urgent) {
		_, err := u.cancelled(ctx)
		return err
	}
	defer u.r.opts.Limiter.release()
	return fn()
}

// cancelled is how a run whose context ended ends: a tailing one has no
// end of its own, one to the end did not reach it.
func (u *run) cancelled(ctx context.Context) (Result, error) {
	if u.r.opts.Tail {
		return Result{Ending: Cancelled}, nil
	}
	return Result{}, fmt.Errorf("restore task %s stopped after seq %d: %w", u.task, u.received, ctx.Err())
}

// add decodes msg into the pending batch and flushes the batch when it is
// large, when the subject has nothing more, or soon.
func (u *run) add(msg jetstream.Msg, received time.Time) error {
	md, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("restore task %s after seq %d: %w", u.task, u.received, err)
	}
	seq := md.Sequence.Stream
	if seq <= u.received {
		return nil // redelivered: already have it
	}
	if err := u.checkChain(msg, seq); err != nil {
		if ferr := u.flush(); ferr != nil {
			return ferr
		}
		return err
	}
	data := msg.Data()
	e, err := u.dec.Decode(data)
	if err != nil {
		// Apply the valid prefix; nothing of this message.
		if ferr := u.flush(); ferr != nil {
			return ferr
		}
		return fmt.Errorf("restore task %s: message at seq %d: %w", u.task, seq, err)
	}
	if e.Kind == changelog.KindRelease && e.Successor != "" && e.Successor == u.r.opts.Member {
		// Everything before the entry is applied first, so that a
		// successor that takes the task over serves it at once; the entry
		// itself is the caller's to apply (Release.Commit).
		if err := u.flush(); err != nil {
			return err
		}
		u.end = max(u.end, seq)
		u.atRelease = &Release{Seq: seq, Epoch: e.Epoch, Successor: e.Successor,
			Stored: md.Timestamp, Received: received, Last: md.NumPending == 0}
		return nil
	}
	u.pending = append(u.pending, Commit(e, seq))
	u.pendingBytes += len(data)
	u.pendingRecs += uint64(len(e.Puts) + len(e.Deletes))
	u.received, u.numPending = seq, md.NumPending
	u.recvMsgs++
	u.recvBytes += uint64(len(data))
	u.end = max(u.end, seq)

	switch {
	case md.NumPending <= u.r.opts.EndWithin || seq >= u.r.wanted.Load() && u.r.wanted.Load() > u.applied:
		// Nothing more to come (or no more than EndWithin), or a waiter
		// wants this sequence.
		if err := u.flush(); err != nil {
			return err
		}
		u.finished = md.NumPending <= u.r.opts.EndWithin && !u.r.opts.Tail
	case u.pendingBytes >= u.r.opts.MaxBatchBytes:
		return u.flush()
	case !u.flushArmed:
		u.flushTimer.Reset(MaxFlushDelay)
		u.flushArmed = true
	}
	return nil
}

// flush applies the pending batch to the store in one commit.
func (u *run) flush() error {
	if u.flushArmed {
		u.flushTimer.Stop()
		u.flushArmed = false
	}
	if len(u.pending) == 0 {
		return nil
	}
	if err := u.r.store.Apply(u.task, u.pending...); err != nil {
		return fmt.Errorf("restore task %s up to seq %d: %w", u.task, u.received, err)
	}
	u.applied = u.received
	u.replayed += uint64(len(u.pending))
	u.replayBytes += uint64(u.pendingBytes)
	u.records += u.pendingRecs
	clear(u.pending) // drop references to messages
	u.pending, u.pendingBytes, u.pendingRecs = u.pending[:0], 0, 0
	u.dec.Reset()
	u.report(false)
	return nil
}

// progress computes the current progress.
func (u *run) progress(now time.Time) Progress {
	lag := u.numPending + uint64(len(u.pending))
	p := Progress{
		Task:          u.task,
		Applied:       u.applied,
		End:           u.end,
		LagMsgs:       lag,
		Records:       u.records,
		Replayed:      u.replayed,
		ReplayedBytes: u.replayBytes,
		Started:       u.started,
		CaughtUp:      lag == 0,
	}
	if u.recvMsgs > 0 {
		p.LagBytes = lag * (u.recvBytes / u.recvMsgs)
	}
	p.Rate, p.ByteRate = u.rate.add(now, u.replayed, u.replayBytes)
	if p.Rate > 0 && lag > 0 {
		p.ETA = time.Duration(float64(lag) / p.Rate * float64(time.Second))
	}
	return p
}

// report publishes the progress and calls OnProgress when force is set, when
// the run has just caught up, or when the interval has passed since the last
// call; otherwise it schedules a call for when the interval will have passed.
func (u *run) report(force bool) {
	now := time.Now()
	p := u.progress(now)
	u.r.publish(p)
	cb := u.r.opts.OnProgress
	if cb == nil {
		return
	}
	interval := u.r.opts.ProgressInterval
	if !force && !(p.CaughtUp && !u.reportedEnd) && now.Sub(u.lastReport) < interval {
		if !u.reportArmed {
			u.reportTimer.Reset(interval - now.Sub(u.lastReport))
			u.reportArmed = true
		}
		return
	}
	if u.reportArmed {
		u.reportTimer.Stop()
		u.reportArmed = false
	}
	u.lastReport, u.reportedEnd = now, p.CaughtUp
	cb(p)
}

// rateWindow measures rates over the last rateWindowSpan.
type rateWindow struct{ samples []rateSample }

type rateSample struct {
	t           time.Time
	msgs, bytes uint64
}

const (
	rateWindowSpan = 5 * time.Second
	// rateSampleGap coalesces samples closer than this, bounding the window
	// to about 50 samples however often Run flushes.
	rateSampleGap = 100 * time.Millisecond
)

func (w *rateWindow) reset(now time.Time) { w.samples = append(w.samples[:0], rateSample{t: now}) }

// add records the totals at now and returns the rates since the oldest
// sample in the window.
func (w *rateWindow) add(now time.Time, msgs, bytes uint64) (rate, byteRate float64) {
	if n := len(w.samples); n > 1 && now.Sub(w.samples[n-2].t) < rateSampleGap {
		w.samples[n-1] = rateSample{now, msgs, bytes}
	} else {
		w.samples = append(w.samples, rateSample{now, msgs, bytes})
	}
	// Keep one sample at or before the window's start as the baseline.
	drop := 0
	for drop+1 < len(w.samples)-1 && now.Sub(w.samples[drop+1].t) >= rateWindowSpan {
		drop++
	}
	if drop > 0 {
		w.samples = append(w.samples[:0], w.samples[drop:]...)
	}
	first, last := w.samples[0], w.samples[len(w.samples)-1]
	dt := last.t.Sub(first.t).Seconds()
	if dt <= 0 {
		return 0, 0
	}
	return float64(last.msgs-first.msgs) / dt, float64(last.bytes-first.bytes) / dt
}

package restore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/snapshot"
	"github.com/handoffhq/handoff/statestore"
)

// Where a restore starts. The changelog below a stored snapshot may have
// been trimmed (see package snapshot), so before Run replays from the
// store's applied sequence it checks that the changelog continues from it:
// every message changelog.Append writes carries, in its fence header, the
// sequence of the message before it on the subject, so the first message
// after the local copy must name the copy's applied sequence. If it names a
// later one, messages in between were purged and replaying would silently
// miss them. Run checks the same of every message it applies, since a trim
// may happen while it runs.
//
// With a snapshot bucket (Options.Snapshots):
//   - a local copy at or past the newest snapshot skips it and replays;
//   - a local copy the changelog continues from but older than the newest
//     snapshot replays too, unless the changelog between it and the
//     snapshot has more messages than the snapshot has keys: then it loads
//     the snapshot;
//   - an empty store loads the newest snapshot;
//   - a copy the changelog does not continue from is replaced by the newest
//     snapshot the changelog continues from.
//
// A snapshot that is missing, corrupt or unreadable is logged and the next
// older one tried, then the local copy or the whole changelog, if the
// changelog continues from it (for an empty store: still starts at the
// task's first message). Otherwise Run fails with ErrGap: it never leaves
// a partial state behind. A snapshot is swapped in only once it has been
// read whole and its checksum holds (statestore.Loader), so a failed load
// leaves the local copy as it was.

// ErrGap is wrapped by Run's error when the changelog does not continue
// from the store's copy of the task (it was trimmed past it) and no usable
// snapshot bridges the gap.
var ErrGap = errors.New("restore: changelog was trimmed past the local copy and no usable snapshot covers the gap")

// maxGapRestarts bounds how often one Run starts over from a snapshot when
// it meets a trim while it runs.
const maxGapRestarts = 3

// Log field names of snapshot loads.
const (
	logSnapshot = "snapshot"
	logKeys     = "keys"
)

// LoadedSnapshot returns the snapshot Run loaded, if it loaded one.
func (r *Replayer) LoadedSnapshot() (snapshot.Info, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loaded, r.loaded.Seq > 0
}

// prepare makes sure the changelog continues from the store's copy of the
// task, loading a snapshot when needed or cheaper (see above).
func (r *Replayer) prepare(ctx context.Context) error {
	task := r.opts.Task
	loading, err := r.store.Loading(task)
	if err != nil {
		return fmt.Errorf("restore task %s: %w", task, err)
	}
	if loading {
		// A load that ended without cleaning up: its data is not a state
		// of the task.
		if err := r.store.Drop(task); err != nil {
			return fmt.Errorf("restore task %s: drop a half-loaded copy: %w", task, err)
		}
		r.logger.Warn().Msg("dropped a half-loaded copy of the task")
	}
	applied, cont, err := r.position(ctx)
	if err != nil {
		return err
	}
	if r.opts.Snapshots == nil {
		if !cont {
			return fmt.Errorf("restore task %s from seq %d: the changelog was trimmed past it and no snapshot bucket was given: %w", task, applied, ErrGap)
		}
		return nil
	}
	snaps, err := r.opts.Snapshots.List(ctx, task)
	if err != nil {
		if cont {
			r.logger.Warn().Err(err).Msg("cannot list snapshots; replaying the changelog")
			return nil
		}
		return fmt.Errorf("restore task %s from seq %d: %w", task, applied, err)
	}
	if cont && applied > 0 {
		if len(snaps) == 0 || snaps[0].Seq <= applied {
			return nil
		}
		cheaper, err := r.replayCheaper(ctx, applied, snaps[0])
		if err != nil {
			r.logger.Warn().Err(err).Msg("cannot compare replay and snapshot; replaying the changelog")
			return nil
		}
		if cheaper {
			return nil
		}
	}
	for _, s := range snaps {
		if s.Seq <= applied {
			break // no newer than the copy
		}
		ok, err := r.continues(ctx, s.Seq)
		if err != nil {
			return err
		}
		if !ok {
			r.logger.Warn().Str(logSnapshot, s.Name).Msg("snapshot is older than what the changelog keeps; trying an older one")
			continue
		}
		err = r.load(ctx, s)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("restore task %s: %w", task, ctx.Err())
		}
		r.logger.Error().Err(err).Str(logSnapshot, s.Name).Msg("snapshot unusable; falling back to an older snapshot or the changelog")
		// A load that failed in its last step has dropped the copy.
		if applied, cont, err = r.position(ctx); err != nil {
			return err
		}
	}
	if cont {
		if applied == 0 && len(snaps) > 0 {
			r.logger.Warn().Msg("no usable snapshot; replaying the whole changelog, which still starts at the task's first message")
		}
		return nil
	}
	return fmt.Errorf("restore task %s from seq %d: %d snapshots, none usable: %w", task, applied, len(snaps), ErrGap)
}

// position returns the store's applied sequence of the task and whether
// the changelog continues from it.
func (r *Replayer) position(ctx context.Context) (applied uint64, cont bool, err error) {
	meta, _, err := r.store.Meta(r.opts.Task)
	if err != nil {
		return 0, false, fmt.Errorf("restore task %s: %w", r.opts.Task, err)
	}
	cont, err = r.continues(ctx, meta.Applied)
	return meta.Applied, cont, err
}

// replayCheaper tells whether replaying the changelog from applied costs
// no more than loading s: the messages a load would skip are at most the
// snapshot's keys. (A key loads several times faster than a message
// replays, so this leans towards replaying, which keeps the local copy.)
func (r *Replayer) replayCheaper(ctx context.Context, applied uint64, s snapshot.Info) (bool, error) {
	if s.Seq-applied <= s.Keys {
		return true, nil // fewer messages in between, of any task
	}
	from, err := r.pendingFrom(ctx, applied+1)
	if err != nil {
		return false, err
	}
	to, err := r.pendingFrom(ctx, s.Seq+1)
	if err != nil {
		return false, err
	}
	return from-min(to, from) <= s.Keys, nil
}

// pendingFrom counts the task's messages at or after seq.
func (r *Replayer) pendingFrom(ctx context.Context, seq uint64) (uint64, error) {
	c, err := r.log.Stream().CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject:     r.log.Subject(r.opts.Task),
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       seq,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return 0, fmt.Errorf("restore task %s: count messages from seq %d: %w", r.opts.Task, seq, err)
	}
	n := c.CachedInfo().NumPending
	_ = r.log.Stream().DeleteConsumer(ctx, c.CachedInfo().Name)
	return n, nil
}

// continues reports whether the changelog continues from seq: the first
// message after seq on the task's subject names seq as the one before it,
// or there is no message after seq. A message without the fence header
// (not written by changelog.Append) cannot tell and counts as continuing.
func (r *Replayer) continues(ctx context.Context, seq uint64) (bool, error) {
	msg, err := r.log.Stream().GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(r.log.Subject(r.opts.Task)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("restore task %s: read the message after seq %d: %w", r.opts.Task, seq, err)
	}
	prev, ok := predecessor(msg.Header)
	return !ok || prev == seq, nil
}

// predecessor returns the sequence of the message before a changelog
// message on its subject, from its fence header.
func predecessor(h nats.Header) (uint64, bool) {
	v := h.Get(jetstream.ExpectedLastSubjSeqHeader)
	if v == "" || h.Get(jetstream.ExpectedLastSubjSeqSubjHeader) != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return n, err == nil
}

// checkChain returns an error wrapping ErrGap when msg, at seq, does not
// follow the last message received.
func (u *run) checkChain(msg jetstream.Msg, seq uint64) error {
	prev, ok := predecessor(msg.Headers())
	if !ok || prev <= u.received {
		return nil
	}
	return fmt.Errorf("restore task %s: message at seq %d follows seq %d, but the copy is at seq %d: the changelog was trimmed meanwhile: %w",
		u.task, seq, prev, u.received, ErrGap)
}

// restartOnGap tells whether Run should start over after err, loading a
// snapshot: a trim overtook it and a snapshot bucket was given.
func (r *Replayer) restartOnGap(ctx context.Context, err error, attempt int) bool {
	if !errors.Is(err, ErrGap) || r.opts.Snapshots == nil || attempt >= maxGapRestarts || ctx.Err() != nil {
		return false
	}
	r.logger.Warn().Err(err).Msg("changelog trimmed while replaying; starting over from a snapshot")
	return true
}

// load replaces the store's copy of the task with snapshot s once it has
// read it whole; a failure leaves the copy as it was (or, failing in the
// swap itself, empty), never partial.
func (r *Replayer) load(ctx context.Context, s snapshot.Info) error {
	start := time.Now()
	rd, err := r.opts.Snapshots.Read(ctx, s)
	if err != nil {
		return err
	}
	defer rd.Close()
	l, err := r.store.Load(r.opts.Task)
	if err != nil {
		return fmt.Errorf("load %s: %w", s, err)
	}
	defer l.Abort()
	for rd.Next() {
		if err := l.Put(rd.Key(), rd.Value()); err != nil {
			return fmt.Errorf("load %s: %w", s, err)
		}
	}
	if err := rd.Err(); err != nil {
		return fmt.Errorf("load %s: %w", s, err)
	}
	h := rd.Header()
	if err := l.Finish(statestore.Meta{Applied: h.Seq, Epoch: h.Epoch, Checkpoint: h.Checkpoint}); err != nil {
		return fmt.Errorf("load %s: %w", s, err)
	}
	r.mu.Lock()
	r.loaded = s
	r.mu.Unlock()
	r.logger.Info().Str(logSnapshot, s.Name).Uint64(logSeq, s.Seq).Uint64(logKeys, l.Keys()).
		Int64("bytes", rd.Size()).Dur("took", time.Since(start)).Msg("loaded snapshot; replaying the changelog after it")
	return nil
}

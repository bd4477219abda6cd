package snapshot

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/changelog"
)

// Retention: once a snapshot is stored, the changelog below it is only
// needed by members whose copy is older than the snapshot. Trim keeps every
// message at and after the oldest snapshot it keeps, plus Margin messages
// before it, and purges the rest of the task's subject; it never purges the
// subject's last message (the oldest kept snapshot is at or below it), which
// the fence of the next append names. Then it deletes the snapshots beyond
// the newest Keep. So each kept snapshot can be continued from the
// changelog, and a member at most Margin messages behind the oldest of them
// needs no snapshot at all.
//
// Whether a member's copy can be continued is exact, not guessed: each
// changelog message carries the sequence of the message before it on its
// subject (the fence header changelog.Append sets), so a restore sees at
// once that the next message it gets does not follow the one it has.

// Retention defaults.
const (
	DefaultKeep   = 2
	DefaultMargin = 1000
)

// Retention says what Trim keeps of a task's history.
type Retention struct {
	// Keep is how many of the task's newest snapshots to keep; 0 means
	// DefaultKeep. Keeping 2 lets a restore fall back to the older one if
	// the newest is unreadable.
	Keep int
	// Margin is how many changelog messages to keep below the oldest kept
	// snapshot; 0 means DefaultMargin.
	Margin uint64
}

func (r Retention) withDefaults() Retention {
	if r.Keep <= 0 {
		r.Keep = DefaultKeep
	}
	if r.Margin == 0 {
		r.Margin = DefaultMargin
	}
	return r
}

// Trimmed reports what Trim did.
type Trimmed struct {
	// PurgedBelow is the sequence below which the task's changelog was
	// purged; 0 when Trim purged nothing.
	PurgedBelow uint64
	// Deleted lists the snapshots Trim deleted.
	Deleted []Info
}

// Trim applies r to task's snapshots and changelog (see Retention): it
// purges the changelog below the oldest kept snapshot less the margin, then
// deletes the snapshots beyond the newest r.Keep. With no snapshot it does
// nothing.
func (b *Bucket) Trim(ctx context.Context, log *changelog.Log, task string, r Retention) (Trimmed, error) {
	r = r.withDefaults()
	var out Trimmed
	snaps, err := b.List(ctx, task)
	if err != nil || len(snaps) == 0 {
		return out, err
	}
	keep := snaps[:min(r.Keep, len(snaps))]
	oldest := keep[len(keep)-1]
	last, err := log.Last(ctx, task)
	if err != nil {
		return out, err
	}
	if oldest.Seq > last {
		// Snapshots of another changelog (a stream that was recreated):
		// purging below one could take the subject's last message.
		return out, fmt.Errorf("trim task %s: %s is past the changelog's last message %d; not trimming", task, oldest, last)
	}
	floor, err := marginFloor(ctx, log, task, oldest.Seq, r.Margin)
	if err != nil {
		return out, err
	}
	if floor > 0 {
		err := log.Stream().Purge(ctx, jetstream.WithPurgeSubject(log.Subject(task)), jetstream.WithPurgeSequence(floor))
		if err != nil {
			return out, fmt.Errorf("trim task %s: purge below seq %d: %w", task, floor, err)
		}
		out.PurgedBelow = floor
	}
	for _, s := range snaps[len(keep):] {
		if err := b.Delete(ctx, s); err != nil {
			return out, err
		}
		out.Deleted = append(out.Deleted, s)
	}
	return out, nil
}

// marginFloor returns the sequence of the margin-th message of task's
// subject below seq: purging below it keeps margin messages before seq.
// It returns 0 when at most margin messages precede seq (nothing to
// purge). It reads the subject's headers from its first message on.
func marginFloor(ctx context.Context, log *changelog.Log, task string, seq, margin uint64) (uint64, error) {
	cons, err := log.Stream().OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{log.Subject(task)},
		HeadersOnly:       true,
		InactiveThreshold: changelog.ConsumerInactive,
	})
	if err != nil {
		return 0, fmt.Errorf("trim task %s: %w", task, err)
	}
	// ring holds the sequences of the last margin messages below seq.
	ring := make([]uint64, 0, min(margin, 1<<16))
	next, n := 0, uint64(0)
	for empty := 0; empty < 2; {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		batch, err := cons.FetchNoWait(4096)
		if err != nil {
			return 0, fmt.Errorf("trim task %s: read changelog headers: %w", task, err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			md, err := msg.Metadata()
			if err != nil {
				return 0, fmt.Errorf("trim task %s: %w", task, err)
			}
			s := md.Sequence.Stream
			if s >= seq {
				if n <= margin {
					return 0, nil
				}
				return ring[next], nil // the oldest of the last margin
			}
			n++
			if uint64(len(ring)) < margin {
				ring = append(ring, s)
				continue
			}
			ring[next] = s
			next = (next + 1) % len(ring)
		}
		if err := batch.Error(); err != nil {
			return 0, fmt.Errorf("trim task %s: read changelog headers: %w", task, err)
		}
		if got == 0 {
			empty++
		}
	}
	return 0, fmt.Errorf("trim task %s: changelog ends before seq %d", task, seq)
}

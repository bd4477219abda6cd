package lab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/record"
	"github.com/handoffhq/handoff/statestore"
)

// History is the state every stateful task has before the group starts:
// Keys records of ValueSize bytes, written to the task's changelog in
// messages of PerMessage records. Restores replay it.
type History struct {
	Keys      int
	ValueSize int
	// PerMessage is how many records one changelog message holds; 0
	// means as many as fit in about 32 KB, at most 100.
	PerMessage int
}

// HistoryKeyPrefix starts the keys of the history, which the input's keys
// (record.InputKey) never do; the final check counts them apart.
const HistoryKeyPrefix = record.HistoryKeyPrefix

// HistoryStats says what Preload wrote.
type HistoryStats struct {
	Tasks    int
	Messages uint64
	Records  uint64
	Bytes    uint64 // encoded changelog entries
	Took     time.Duration
}

// Preload writes h into every stateful task's changelog, before any member
// starts: an epoch-0 marker, then commits at epoch 0, as if a previous owner
// had built the state. The content depends only on h and Options.Seed, so
// labs with the same seed hold the same history.
func (l *Lab) Preload(ctx context.Context, h History) (HistoryStats, error) {
	if h.PerMessage <= 0 {
		h.PerMessage = min(max(32<<10/(h.ValueSize+24), 1), 100)
	}
	st := HistoryStats{}
	if h.Keys <= 0 {
		return st, nil
	}
	t0 := time.Now()
	value := make([]byte, h.ValueSize)
	for _, t := range l.rec.tasks {
		if !t.Stateful {
			continue
		}
		st.Tasks++
		rng := rand.New(rand.NewPCG(l.opts.Seed, uint64(len(t.ID))<<32|hash(t.ID)))
		subject := changelog.Subject(l.opts.Group, t.ID)
		var futures []jetstream.PubAckFuture
		send := func(e changelog.Entry) error {
			data := changelog.Encode(nil, e)
			f, err := l.js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: data})
			if err != nil {
				return fmt.Errorf("lab: preload %s: %w", t.ID, err)
			}
			futures = append(futures, f)
			st.Messages++
			st.Bytes += uint64(len(data))
			return nil
		}
		if err := send(changelog.Entry{Kind: changelog.KindEpoch}); err != nil {
			return st, err
		}
		for i := 0; i < h.Keys; i += h.PerMessage {
			e := changelog.Entry{Kind: changelog.KindCommit}
			for j := i; j < min(i+h.PerMessage, h.Keys); j++ {
				fill(rng, value)
				e.Puts = append(e.Puts, statestore.KV{Key: fmt.Appendf(nil, "%s%08d", HistoryKeyPrefix, j), Value: append([]byte(nil), value...)})
			}
			st.Records += uint64(len(e.Puts))
			if err := send(e); err != nil {
				return st, err
			}
		}
		select {
		case <-l.js.PublishAsyncComplete():
		case <-ctx.Done():
			return st, fmt.Errorf("lab: preload %s: %w", t.ID, ctx.Err())
		}
		for _, f := range futures {
			select {
			case err := <-f.Err():
				return st, fmt.Errorf("lab: preload %s: %w", t.ID, err)
			default:
			}
		}
	}
	st.Took = time.Since(t0)
	return st, nil
}

// fill fills b with random bytes from rng.
func fill(rng *rand.Rand, b []byte) {
	for i := 0; i < len(b); i += 8 {
		v := rng.Uint64()
		for j := i; j < min(i+8, len(b)); j++ {
			b[j] = byte(v)
			v >>= 8
		}
	}
}

// hash is FNV-1a of s.
func hash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

package group

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Watch follows one key of a group's bucket, or a wildcard of keys (such as
// PrefixMember+">"), across the ends of its watchers. It is the one watch
// loop of the agent: the member loop follows KeyGeneration and KeyConfig
// with it, the leader the member records.
type Watch struct {
	KV jetstream.KeyValue
	// Key is the key (or wildcard) to watch; Keys, if set, are several
	// to watch with one consumer instead, their entries in the order the
	// bucket stored them.
	Key  string
	Keys []string
	// Rewatch returns a channel closed when the connection to NATS comes
	// back: a KV watcher is an ordered consumer that notices a restarted
	// server only after missing heartbeats for many seconds. Nil means
	// never.
	Rewatch func() <-chan struct{}
	Log     zerolog.Logger
	// Reset, if set, is called before every fresh watch: the current
	// values follow, so what the caller built from the last one is stale.
	Reset func()
	// Update is called, on Run's goroutine, with every entry: the current
	// values first, then each update. It is called with nil once the
	// current values have all been delivered (a complete view) if Complete
	// is set, and never otherwise.
	Update   func(jetstream.KeyValueEntry) error
	Complete bool
}

// Run watches until ctx ends. It watches again, so that Update sees the
// current values once more (Update must be idempotent), when the watcher
// ends, when the connection comes back, and after Update fails, so that a
// transient error is retried rather than left until the next update.
func (w Watch) Run(ctx context.Context) {
	for ctx.Err() == nil {
		var rewatch <-chan struct{}
		if w.Rewatch != nil {
			rewatch = w.Rewatch() // before watching: a reconnect after it rewatches
		}
		var (
			kw  jetstream.KeyWatcher
			err error
		)
		if len(w.Keys) > 0 {
			// A copy: WatchFiltered rewrites the keys it is given into
			// subjects, and the next watch needs them as keys.
			kw, err = w.KV.WatchFiltered(ctx, slices.Clone(w.Keys))
		} else {
			kw, err = w.KV.Watch(ctx, w.Key)
		}
		if err != nil {
			if ctx.Err() == nil {
				w.Log.Warn().Err(err).Str("key", w.name()).Msg("watch failed; retrying")
				Sleep(ctx, 250*time.Millisecond)
			}
			continue
		}
		if w.Reset != nil {
			w.Reset()
		}
		err = w.drain(ctx, kw, rewatch)
		_ = kw.Stop()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.Log.Warn().Err(err).Str("key", w.name()).Msg("handling a watched update failed; reading it again")
			Sleep(ctx, 250*time.Millisecond)
		}
	}
}

// name names the watched keys in a log line.
func (w Watch) name() string {
	if len(w.Keys) > 0 {
		return strings.Join(w.Keys, ",")
	}
	return w.Key
}

// drain passes kw's entries to Update until kw, rewatch or ctx ends, or
// Update fails.
func (w Watch) drain(ctx context.Context, kw jetstream.KeyWatcher, rewatch <-chan struct{}) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-rewatch:
			return nil
		case e, ok := <-kw.Updates():
			if !ok {
				return nil
			}
			if e == nil && !w.Complete {
				continue
			}
			if err := w.Update(e); err != nil {
				return err
			}
		}
	}
}

// Sleep waits d or until ctx ends, reporting whether d passed. It paces
// loops and backs off before retries; it never waits for a condition.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

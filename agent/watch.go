package agent

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/group"
)

// watchKey calls fn with every entry of key (its current value first, then
// each update; never the nil end-of-initial-values marker) until ctx ends.
// It watches again, so that fn sees the current value once more (fn must
// be idempotent), when the watcher ends, when the connection to NATS comes
// back (a KV watcher is an ordered consumer that notices a restarted server
// only after missing heartbeats for many seconds), and after fn fails, so
// that a transient error is retried rather than left until the next update.
func (a *Agent) watchKey(ctx context.Context, key string, fn func(jetstream.KeyValueEntry) error) {
	for ctx.Err() == nil {
		rewatch := a.rewatchSignal()
		w, err := a.kv.Watch(ctx, key)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn().Err(err).Str("key", key).Msg("watch failed; retrying")
				group.Sleep(ctx, 250*time.Millisecond)
			}
			continue
		}
		err = a.drainWatch(ctx, w, rewatch, fn)
		_ = w.Stop()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			a.log.Warn().Err(err).Str("key", key).Msg("handling a watched update failed; reading it again")
			group.Sleep(ctx, 250*time.Millisecond)
		}
	}
}

// drainWatch passes w's entries to fn until w, rewatch or ctx ends, or fn
// fails.
func (a *Agent) drainWatch(ctx context.Context, w jetstream.KeyWatcher, rewatch <-chan struct{}, fn func(jetstream.KeyValueEntry) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-rewatch:
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				continue
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
}

// rewatchSignal returns a channel that is closed when the connection to
// NATS comes back, so that watchers start afresh.
func (a *Agent) rewatchSignal() <-chan struct{} {
	a.rewatchMu.Lock()
	defer a.rewatchMu.Unlock()
	return a.rewatch
}

// onReconnect wakes every watcher to watch again.
func (a *Agent) onReconnect() {
	a.rewatchMu.Lock()
	close(a.rewatch)
	a.rewatch = make(chan struct{})
	a.rewatchMu.Unlock()
	a.log.Info().Msg("reconnected to NATS: watching the group afresh")
}

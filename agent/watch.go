package agent

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// watchKey calls fn with every entry of key (its current value first, then
// each update; never the nil end-of-initial-values marker) until ctx ends.
// A KV watcher can end with its connection to NATS; watchKey then watches
// again, so fn sees the current value once more and must be idempotent.
func (a *Agent) watchKey(ctx context.Context, key string, fn func(jetstream.KeyValueEntry)) {
	for ctx.Err() == nil {
		w, err := a.kv.Watch(ctx, key)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn().Err(err).Str("key", key).Msg("watch failed; retrying")
				sleepCtx(ctx, 250*time.Millisecond)
			}
			continue
		}
		a.drainWatch(ctx, w, fn)
		_ = w.Stop()
		if ctx.Err() == nil {
			a.log.Warn().Str("key", key).Msg("watch ended; watching again")
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}
}

// drainWatch passes w's entries to fn until w or ctx ends.
func (a *Agent) drainWatch(ctx context.Context, w jetstream.KeyWatcher, fn func(jetstream.KeyValueEntry)) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil {
				fn(e)
			}
		}
	}
}

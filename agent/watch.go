package agent

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/group"
)

// rewatchSignal returns a channel that is closed when the connection to
// NATS comes back, so that watchers start afresh.
func (a *Agent) rewatchSignal() <-chan struct{} {
	return *a.rewatch.Load()
}

// onReconnect wakes every watcher to watch again.
func (a *Agent) onReconnect() {
	next := make(chan struct{})
	close(*a.rewatch.Swap(&next))
	a.log.Info().Msg("reconnected to NATS: watching the group afresh")
}

// watchKey calls fn with every entry of key, the current one first, until
// ctx ends, watching again across reconnects (see group.Watch).
func (a *Agent) watchKey(ctx context.Context, key string, fn func(jetstream.KeyValueEntry) error) {
	group.Watch{KV: a.kv, Key: key, Rewatch: a.rewatchSignal, Log: a.log, Update: fn}.Run(ctx)
}

package agent

import (
	"context"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/group"
)

// broadcast wakes every goroutine waiting on it, as often as it fires:
// each fire closes the channel the waiters hold and hands later ones a
// fresh one.
type broadcast struct{ ch atomic.Pointer[chan struct{}] }

func newBroadcast() *broadcast {
	b := &broadcast{}
	ch := make(chan struct{})
	b.ch.Store(&ch)
	return b
}

// wait returns a channel closed at the next fire.
func (b *broadcast) wait() <-chan struct{} { return *b.ch.Load() }

// fire wakes every waiter.
func (b *broadcast) fire() {
	next := make(chan struct{})
	close(*b.ch.Swap(&next))
}

// rewatchSignal returns a channel that is closed when the connection to
// NATS comes back, so that watchers start afresh.
func (a *Agent) rewatchSignal() <-chan struct{} { return a.rewatch.wait() }

// onReconnect wakes every watcher to watch again.
func (a *Agent) onReconnect() {
	a.rewatch.fire()
	a.log.Info().Msg("reconnected to NATS: watching the group afresh")
}

// watchKey calls fn with every entry of key, the current one first, until
// ctx ends, watching again across reconnects (see group.Watch).
func (a *Agent) watchKey(ctx context.Context, key string, fn func(jetstream.KeyValueEntry) error) {
	group.Watch{KV: a.kv, Key: key, Rewatch: a.rewatchSignal, Log: a.log, Update: fn}.Run(ctx)
}

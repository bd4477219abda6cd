package agent

import (
	"context"
	"sync/atomic"
)

// broadcast wakes every goroutine waiting on it, as often as it fires:
// each fire ends the round the waiters hold and hands later ones a fresh
// one. A round is a context, so that a restore can be cut by the next fire
// without a goroutine of its own to watch for it (context.AfterFunc).
type broadcast struct {
	cur atomic.Pointer[broadcastRound]
}

type broadcastRound struct {
	ctx  context.Context
	done context.CancelFunc
}

func newBroadcast() *broadcast {
	b := &broadcast{}
	b.cur.Store(newBroadcastRound())
	return b
}

func newBroadcastRound() *broadcastRound {
	ctx, done := context.WithCancel(context.Background())
	return &broadcastRound{ctx, done}
}

// wait returns a channel closed at the next fire.
func (b *broadcast) wait() <-chan struct{} { return b.round().Done() }

// round returns a context that ends at the next fire.
func (b *broadcast) round() context.Context { return b.cur.Load().ctx }

// fire wakes every waiter.
func (b *broadcast) fire() { b.cur.Swap(newBroadcastRound()).done() }

// rewatchSignal returns a channel that is closed when the connection to
// NATS comes back, so that watchers start afresh.
func (a *Agent) rewatchSignal() <-chan struct{} { return a.rewatch.wait() }

// onReconnect wakes every watcher to watch again.
func (a *Agent) onReconnect() {
	a.rewatch.fire()
	a.log.Info().Msg("reconnected to NATS: watching the group afresh")
}

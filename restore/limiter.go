package restore

import (
	"context"
	"sync"
)

// Limiter bounds how many Replayers that share it work at once: decode a
// message or apply a batch. A member's restores that catch up share one,
// so that however many run, a core stays free for the rest of the member's
// work (its tailers, commits and API), which would otherwise wait for a
// thread behind them. A nil Limiter bounds nothing.
//
// A Limiter can also be held (Hold): while any hold is in force, its
// Replayers take no further step, except those whose Options.Urgent says
// so. A member holds its catch-ups while a task is being handed over to
// it, so that the hand-off's messages wait behind none of their work, in
// the member or in the server (a Replayer that takes no step stops pulling
// once its buffers are full).
type Limiter struct {
	slots chan struct{}

	mu    sync.Mutex
	holds int
	free  chan struct{} // closed while no hold is in force
}

// NewLimiter returns a Limiter of n slots (at least one).
func NewLimiter(n int) *Limiter {
	free := make(chan struct{})
	close(free)
	return &Limiter{slots: make(chan struct{}, max(n, 1)), free: free}
}

// Hold makes the Limiter's Replayers, but the urgent ones, wait before
// their next step until release is called, and every other hold's release
// too. A step under way finishes. release may be called more than once.
func (l *Limiter) Hold() (release func()) {
	l.mu.Lock()
	if l.holds == 0 {
		l.free = make(chan struct{})
	}
	l.holds++
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.holds--
			if l.holds == 0 {
				close(l.free)
			}
		})
	}
}

// Held reports whether a hold is in force.
func (l *Limiter) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds > 0
}

// released returns a channel that is closed while no hold is in force.
func (l *Limiter) released() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.free
}

// acquire takes a slot once no hold is in force (at once for an urgent
// step), or reports false when ctx ends first.
func (l *Limiter) acquire(ctx context.Context, urgent bool) bool {
	if l == nil {
		return true
	}
	for {
		if !urgent {
			select {
			case <-l.released():
			case <-ctx.Done():
				return false
			}
		}
		select {
		case l.slots <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		if urgent || !l.Held() {
			return true
		}
		<-l.slots // a hold came while it waited for the slot: wait for its end
	}
}

func (l *Limiter) release() {
	if l != nil {
		<-l.slots
	}
}

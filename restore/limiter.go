package restore

import "context"

// Limiter bounds how many Replayers that share it work at once: decode a
// message or apply a batch. A member's restores that catch up share one,
// so that however many run, a core stays free for the rest of the member's
// work (its tailers, commits and API), which would otherwise wait for a
// thread behind them. A nil Limiter bounds nothing.
type Limiter struct{ slots chan struct{} }

// NewLimiter returns a Limiter of n slots (at least one).
func NewLimiter(n int) *Limiter { return &Limiter{slots: make(chan struct{}, max(n, 1))} }

// acquire takes a slot, or reports false when ctx ends first.
func (l *Limiter) acquire(ctx context.Context) bool {
	if l == nil {
		return true
	}
	select {
	case l.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (l *Limiter) release() {
	if l != nil {
		<-l.slots
	}
}

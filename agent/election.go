package agent

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/group"
)

// leaseRecord is what this member writes in the lease when it leads.
func (a *Agent) leaseRecord() group.LeaseRecord {
	return group.LeaseRecord{Member: a.opts.MemberID, Incarnation: a.incarnation, Since: a.started}
}

// runElection campaigns for the lease until ctx ends, and leads whenever it
// holds it.
func (a *Agent) runElection(ctx context.Context) error {
	ttl := a.config().SessionTimeout.D()
	for ctx.Err() == nil {
		l, err := group.Campaign(ctx, a.js, a.kv, a.opts.Group, a.leaseRecord(), ttl)
		switch {
		case err == nil:
			if err := a.holdLease(ctx, l); err != nil && ctx.Err() == nil {
				a.log.Warn().Err(err).Msg("stopped leading")
			}
		case errors.Is(err, jetstream.ErrKeyExists):
			a.waitLeaseGone(ctx, ttl) // someone leads
		default:
			if ctx.Err() == nil {
				a.log.Warn().Err(err).Msg("campaign for leader lease failed; retrying")
				group.Sleep(ctx, ttl/4)
			}
		}
	}
	return nil
}

// waitLeaseGone returns once the lease is deleted or expires (or may have:
// when the watch ends, campaigning again is how to find out), or ctx ends.
// It also returns after ttl at the latest, so that a missed watch event
// delays an election by one session timeout, never forever.
func (a *Agent) waitLeaseGone(ctx context.Context, ttl time.Duration) {
	rewatch := a.rewatchSignal()
	w, err := a.kv.Watch(ctx, group.KeyLease)
	if err != nil {
		group.Sleep(ctx, 250*time.Millisecond)
		return
	}
	defer func() { _ = w.Stop() }()
	recheck := time.NewTimer(ttl)
	defer recheck.Stop()
	held := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-recheck.C:
			return
		case <-rewatch:
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			switch {
			case e == nil && !held:
				return // no lease now: campaign
			case e == nil:
			case e.Operation() != jetstream.KeyValuePut:
				return
			default:
				held = true
			}
		}
	}
}

// holdLease leads while the lease holds: it renews the lease and runs the
// leader loop, and gives the lease up when ctx ends.
func (a *Agent) holdLease(ctx context.Context, l *group.Lease) error {
	a.log.Info().Uint64(fRevision, l.Revision()).Msg("elected leader")
	a.metrics.leader.Set(1)
	defer a.metrics.leader.Set(0)
	defer a.metrics.stopLeading()
	ld := newLeader(a, l)
	a.leader.Store(ld)
	defer a.leader.Store(nil)

	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- ld.run(lctx) }()

	t := time.NewTicker(l.TTL() / 3)
	defer t.Stop()
	var err error
loop:
	for {
		select {
		case err = <-done:
			break loop
		case <-t.C:
			if rerr := l.Renew(lctx); rerr != nil {
				if errors.Is(rerr, group.ErrLeaseLost) {
					cancel(rerr)
					err = <-done
					if err == nil || errors.Is(err, context.Canceled) {
						err = rerr
					}
					break loop
				}
				a.log.Warn().Err(rerr).Msg("leader lease renewal failed; retrying")
			}
		}
	}
	if ctx.Err() != nil {
		// Shutting down: hand leadership over at once.
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer rcancel()
		if rerr := l.Release(rctx); rerr != nil {
			a.log.Warn().Err(rerr).Msg("could not release leader lease; it expires with its TTL")
		}
		return nil
	}
	return err
}

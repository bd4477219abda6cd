package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/group"
)

// leaseRecord is what this member writes in the lease when it leads.
func (a *Agent) leaseRecord() group.LeaseRecord {
	return group.LeaseRecord{Member: a.opts.MemberID, Incarnation: a.incarnation, Since: a.started}
}

// leaseLookEvery is how often, in session timeouts, a member that is not a
// candidate looks whether the lease is held.
const leaseLookEvery = 10

// runElection campaigns for the lease until ctx ends, and leads whenever it
// holds it. A member the last generation does not name a candidate does
// not watch the lease (a watch receives every renewal): it looks at it
// every few session timeouts, and campaigns once it finds it gone.
func (a *Agent) runElection(ctx context.Context) error {
	ttl := a.config().SessionTimeout.D()
	for ctx.Err() == nil {
		if !a.candidate.Load() && !a.leaseGone(ctx, ttl) {
			continue
		}
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

// leaseGone waits, while this member is no candidate, until it is time to
// look at the lease again, and reports whether it found the lease gone. It
// returns false at once when the member's candidacy changes or ctx ends.
func (a *Agent) leaseGone(ctx context.Context, ttl time.Duration) bool {
	changed := a.candidacy.wait()
	if !a.candidate.Load() {
		// Jittered, so that the members' looks spread out.
		wait := leaseLookEvery*ttl/2 + rand.N(leaseLookEvery*ttl/2+1)
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-changed:
			return false
		case <-t.C:
		}
	}
	leader, err := group.ReadLeader(ctx, a.kv)
	return err == nil && leader == ""
}

// waitLeaseGone returns once the lease is deleted or expires (or may have:
// when the watch ends, campaigning again is how to find out), or ctx ends.
// It also returns once the watch has shown no renewal for ttl, so that a
// missed watch event delays an election by one session timeout, never
// forever; a leader renews every third of ttl, so while one leads, a
// follower's watch stays open and costs no campaign (a campaign is a
// refused write, a read and a fresh consumer: made by every follower each
// session timeout, it was most of an idle member's NATS traffic).
func (a *Agent) waitLeaseGone(ctx context.Context, ttl time.Duration) {
	rewatch, candidacy := a.rewatchSignal(), a.candidacy.wait()
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
		case <-candidacy:
			if !a.candidate.Load() {
				return // no longer asked to watch
			}
			candidacy = a.candidacy.wait()
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
				recheck.Reset(ttl) // renewed: the leader lives
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
	a.kickProgress() // the leader hears the group's progress
	defer a.kickProgress()
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

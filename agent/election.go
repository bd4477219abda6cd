package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errLeaseLost means the leader's lease was taken over, expired or could not
// be renewed in time; the leader stops at once.
var errLeaseLost = errors.New("leader lease lost")

// lease is a held leader lease. Every leader write is fenced on its
// revision, and renewals move the revision, so the two are serialized.
type lease struct {
	a   *Agent
	ttl time.Duration

	mu      sync.Mutex
	rev     uint64
	renewed time.Time
	lost    bool
}

func (l *lease) subject() string { return "$KV." + BucketName(l.a.opts.Group) + "." + keyLease }

// renew republishes the lease with its TTL, on the condition that it is
// still at the revision the leader holds.
func (l *lease) renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return errLeaseLost
	}
	ack, err := l.a.js.Publish(ctx, l.subject(), l.a.leaseValue(),
		jetstream.WithMsgTTL(l.ttl), jetstream.WithExpectLastSequencePerSubject(l.rev))
	if err != nil {
		if isWrongLastSeq(err) {
			l.lost = true
			return errLeaseLost
		}
		if time.Since(l.renewed) > l.ttl {
			l.lost = true
			return fmt.Errorf("%w: no renewal for %s: %v", errLeaseLost, time.Since(l.renewed).Round(time.Millisecond), err)
		}
		return fmt.Errorf("renew leader lease: %w", err)
	}
	l.rev = ack.Sequence
	l.renewed = time.Now()
	return nil
}

// put writes key only while the lease is the leader's (see
// docs/ARCHITECTURE.md) and returns the new revision of key.
func (l *lease) put(ctx context.Context, key string, value []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return 0, errLeaseLost
	}
	ack, err := l.a.js.Publish(ctx, "$KV."+BucketName(l.a.opts.Group)+"."+key, value,
		jetstream.WithExpectLastSequenceForSubject(l.rev, l.subject()))
	if err != nil {
		if isWrongLastSeq(err) {
			l.lost = true
			return 0, errLeaseLost
		}
		return 0, fmt.Errorf("publish %s: %w", key, err)
	}
	return ack.Sequence, nil
}

// release deletes the lease so that another member takes over at once.
func (l *lease) release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return nil
	}
	l.lost = true
	if err := l.a.kv.Delete(ctx, keyLease, jetstream.LastRevision(l.rev)); err != nil && !isWrongLastSeq(err) {
		return fmt.Errorf("release leader lease: %w", err)
	}
	return nil
}

// isWrongLastSeq reports whether err is JetStream's "wrong last sequence"
// (10071; 10164 on replicated streams), the answer to a failed fence.
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == 10071 || apiErr.ErrorCode == 10164
	}
	return false
}

func (a *Agent) leaseValue() []byte {
	b, _ := json.Marshal(leaseRecord{Member: a.opts.MemberID, Incarnation: a.incarnation, Since: a.started})
	return b
}

// runElection campaigns for the lease until ctx ends, and leads whenever it
// holds it.
func (a *Agent) runElection(ctx context.Context) error {
	ttl := a.config().SessionTimeout.D()
	for ctx.Err() == nil {
		rev, err := a.kv.Create(ctx, keyLease, a.leaseValue(), jetstream.KeyTTL(ttl))
		switch {
		case err == nil:
			l := &lease{a: a, ttl: ttl, rev: rev, renewed: time.Now()}
			if err := a.holdLease(ctx, l); err != nil && ctx.Err() == nil {
				a.log.Warn().Err(err).Msg("stopped leading")
			}
		case errors.Is(err, jetstream.ErrKeyExists):
			a.waitLeaseGone(ctx, ttl) // someone leads
		default:
			if ctx.Err() == nil {
				a.log.Warn().Err(err).Msg("campaign for leader lease failed; retrying")
				sleepCtx(ctx, ttl/4)
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
	w, err := a.kv.Watch(ctx, keyLease)
	if err != nil {
		sleepCtx(ctx, 250*time.Millisecond)
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
func (a *Agent) holdLease(ctx context.Context, l *lease) error {
	a.log.Info().Uint64(fRevision, l.rev).Msg("elected leader")
	a.metrics.leader.Set(1)
	defer a.metrics.leader.Set(0)
	a.setLeader(true)
	defer a.setLeader(false)

	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- a.lead(lctx, l) }()

	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	var err error
loop:
	for {
		select {
		case err = <-done:
			break loop
		case <-t.C:
			if rerr := l.renew(lctx); rerr != nil {
				if errors.Is(rerr, errLeaseLost) {
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
		if rerr := l.release(rctx); rerr != nil {
			a.log.Warn().Err(rerr).Msg("could not release leader lease; it expires with its TTL")
		}
		return nil
	}
	return err
}

// sleepCtx waits d or until ctx ends, reporting whether d passed. Used only
// for retry backoff after errors, never to wait for a condition.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

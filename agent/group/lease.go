package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/handoffhq/handoff/internal/fence"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrLeaseLost means the leader's lease was taken over, expired or could
// not be renewed in time; the leader stops at once.
var ErrLeaseLost = errors.New("leader lease lost")

// Lease is a held leader lease (key KeyLease). Every leader write is fenced
// on its revision, and renewals move the revision, so the two are
// serialized. A Lease is safe for concurrent use.
type Lease struct {
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	group string
	value []byte
	ttl   time.Duration

	term uint64 // the revision at which the lease was won

	mu      sync.Mutex
	rev     uint64
	renewed time.Time
	lost    bool
}

// Campaign creates the lease for rec with a per-key TTL. It returns an
// error wrapping jetstream.ErrKeyExists while another member holds it.
func Campaign(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, group string, rec LeaseRecord, ttl time.Duration) (*Lease, error) {
	value, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode leader lease: %w", err)
	}
	rev, err := kv.Create(ctx, KeyLease, value, jetstream.KeyTTL(ttl))
	if err != nil {
		return nil, fmt.Errorf("create leader lease: %w", err)
	}
	return &Lease{js: js, kv: kv, group: group, value: value, ttl: ttl, term: rev, rev: rev, renewed: time.Now()}, nil
}

// Term is the revision at which the lease was won: it names this
// leadership in what the leader writes (GenerationRecord.Term).
func (l *Lease) Term() uint64 { return l.term }

// Revision is the lease's revision when it was won.
func (l *Lease) Revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// TTL is the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Renew republishes the lease with its TTL, on the condition that it is
// still at the revision the leader holds.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return ErrLeaseLost
	}
	ack, err := l.js.Publish(ctx, keySubject(l.group, KeyLease), l.value,
		jetstream.WithMsgTTL(l.ttl), jetstream.WithExpectLastSequencePerSubject(l.rev))
	if err != nil {
		if _, fenced := fence.WrongLastSequence(err); fenced {
			l.lost = true
			return ErrLeaseLost
		}
		if time.Since(l.renewed) > l.ttl {
			l.lost = true
			return fmt.Errorf("%w: no renewal for %s: %w", ErrLeaseLost, time.Since(l.renewed).Round(time.Millisecond), err)
		}
		return fmt.Errorf("renew leader lease: %w", err)
	}
	l.rev = ack.Sequence
	l.renewed = time.Now()
	return nil
}

// Put writes key only while the lease is the leader's (see
// docs/ARCHITECTURE.md) and returns the new revision of key.
func (l *Lease) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return 0, ErrLeaseLost
	}
	ack, err := l.js.Publish(ctx, keySubject(l.group, key), value,
		jetstream.WithExpectLastSequenceForSubject(l.rev, keySubject(l.group, KeyLease)))
	if err != nil {
		if _, fenced := fence.WrongLastSequence(err); fenced {
			l.lost = true
			return 0, ErrLeaseLost
		}
		return 0, fmt.Errorf("publish %s: %w", key, err)
	}
	return ack.Sequence, nil
}

// Release deletes the lease so that another member takes over at once.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return nil
	}
	l.lost = true
	if err := l.kv.Delete(ctx, KeyLease, jetstream.LastRevision(l.rev)); err != nil {
		if _, fenced := fence.WrongLastSequence(err); !fenced {
			return fmt.Errorf("release leader lease: %w", err)
		}
	}
	return nil
}

// ReadLeader returns the member holding group's lease, or "" if none does.
func ReadLeader(ctx context.Context, kv jetstream.KeyValue) (string, error) {
	e, err := kv.Get(ctx, KeyLease)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read leader lease: %w", err)
	}
	var l LeaseRecord
	if json.Unmarshal(e.Value(), &l) != nil {
		return "", nil
	}
	return l.Member, nil
}

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

// MemberTakenError says that another agent holds the member ID: its member
// record names another owner (another data dir) and is alive.
type MemberTakenError struct {
	Group  string
	Holder MemberRecord // the holder's record, as last written
	// Refreshed is when the holder last wrote its record.
	Refreshed      time.Time
	SessionTimeout time.Duration
	// Lost says this agent held the ID and lost it: its record expired
	// (the agent was stopped or cut off past the session timeout) and
	// another agent claimed it.
	Lost bool
}

func (e *MemberTakenError) Error() string {
	h := e.Holder
	where := "host " + h.Host
	if h.Host == "" {
		where = "an unnamed host"
	}
	if h.Addr != "" {
		where += ", API " + h.Addr
	}
	what := fmt.Sprintf("member ID %q is in use in group %q by a live agent with another data dir", h.ID, e.Group)
	if e.Lost {
		what = fmt.Sprintf("member ID %q of group %q was taken over by another agent while this one was cut off for longer than the session timeout (%s)",
			h.ID, e.Group, e.SessionTimeout)
	}
	return fmt.Sprintf("%s: incarnation %s on %s, started %s, last heartbeat %s. "+
		"Give this agent another --member-id, or stop that agent first; once that agent has exited, or %s after it died, the ID is free",
		what, h.Incarnation, where, h.Started.UTC().Format(time.RFC3339), e.Refreshed.UTC().Format(time.RFC3339Nano), e.SessionTimeout)
}

// MemberClaim is an agent's exclusive hold on its member ID: its member
// record, which it writes only with a revision check, so that no other
// agent's writes can interleave with its own. It is safe for concurrent
// use.
type MemberClaim struct {
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	group string
	id    string
	owner string
	inc   string
	ttl   time.Duration

	replaced string // see Replaced

	mu  sync.Mutex
	rev uint64
}

// Replaced is the incarnation of the owner's previous run whose live record
// ClaimMember took over, or "" if it found none.
func (c *MemberClaim) Replaced() string { return c.replaced }

// ClaimOptions tune ClaimMember.
type ClaimOptions struct {
	// Waiting is called, before ClaimMember waits, with the record of an
	// agent of another data dir that holds the ID.
	Waiting func(holder MemberRecord)
}

// ClaimMember takes member ID rec.ID for rec's owner and writes rec with a
// TTL of ttl:
//
//   - no record (never written, deleted by a clean exit, expired): it
//     creates one, create-if-absent, so of two agents that start at once
//     one creates it and the other finds the winner's record;
//   - a record of the same owner (the same data dir): the owner's previous
//     run, gone (its data dir is locked while it runs), so it takes the
//     record over at once, without waiting for it to expire;
//   - another owner's record: it watches it for up to one and a half
//     session timeouts. A heartbeat means that an agent of another data
//     dir holds the ID: it returns a *MemberTakenError. An expiry or a
//     delete frees the ID, which it then claims.
func ClaimMember(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, group string, rec MemberRecord, ttl time.Duration, o ClaimOptions) (*MemberClaim, error) {
	if rec.Owner == "" {
		return nil, errors.New("claim member ID: the record names no owner")
	}
	c := &MemberClaim{js: js, kv: kv, group: group, id: rec.ID, owner: rec.Owner, inc: rec.Incarnation, ttl: ttl}
	value, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode member record: %w", err)
	}
	for {
		held, e, err := c.read(ctx)
		if err != nil {
			return nil, err
		}
		switch {
		case e == nil:
			rev, err := kv.Create(ctx, PrefixMember+c.id, value, jetstream.KeyTTL(ttl))
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // another agent created it first: look at its record
			}
			if err != nil {
				return nil, fmt.Errorf("create member record: %w", err)
			}
			c.rev = rev
			return c, nil
		case held.Owner == c.owner:
			rev, err := c.publish(ctx, value, e.Revision())
			if errors.Is(err, errFenced) {
				continue
			}
			if err != nil {
				return nil, err
			}
			c.rev, c.replaced = rev, held.Incarnation
			return c, nil
		}
		if o.Waiting != nil {
			o.Waiting(held)
		}
		live, err := c.watch(ctx, e.Revision(), ttl+ttl/2)
		if err != nil {
			return nil, err
		}
		if live != nil {
			var holder MemberRecord
			_ = json.Unmarshal(live.Value(), &holder)
			return nil, &MemberTakenError{Group: group, Holder: holder, Refreshed: live.Created(), SessionTimeout: ttl}
		}
	}
}

// maxRefreshAttempts bounds the writes of one Refresh whose revision check
// fails: each failure moves the claim to the revision it read back.
const maxRefreshAttempts = 5

// errFenced is a write refused because the record is not at the revision
// the claim expected.
var errFenced = errors.New("member record changed")

// Refresh writes rec (a heartbeat) if the record is still the claim's. If
// it is not, because an acknowledgement was lost, or the record expired
// while this agent could not refresh it, it takes the record back when
// nobody else holds it, and returns a *MemberTakenError (Lost) when
// another agent does.
func (c *MemberClaim) Refresh(ctx context.Context, rec MemberRecord) error {
	value, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode member record: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if attempt == maxRefreshAttempts {
			return fmt.Errorf("refresh member record: it changed under each of %d writes", attempt)
		}
		rev, err := c.publish(ctx, value, c.rev)
		if err == nil {
			c.rev = rev
			return nil
		}
		if !errors.Is(err, errFenced) {
			return err
		}
		held, e, err := c.read(ctx)
		if err != nil {
			return err
		}
		switch {
		case e == nil:
			rev, err := c.kv.Create(ctx, PrefixMember+c.id, value, jetstream.KeyTTL(c.ttl))
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			if err != nil {
				return fmt.Errorf("create member record: %w", err)
			}
			c.rev = rev
			return nil
		case held.Owner == c.owner && held.Incarnation == c.inc:
			c.rev = e.Revision() // our own write, its acknowledgement lost
		default:
			return &MemberTakenError{Group: c.group, Holder: held, Refreshed: e.Created(), SessionTimeout: c.ttl, Lost: true}
		}
	}
}

// Release deletes the record if it is still the claim's, so that the group
// sees the member gone at once.
func (c *MemberClaim) Release(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.kv.Delete(ctx, PrefixMember+c.id, jetstream.LastRevision(c.rev))
	if _, fenced := fence.WrongLastSequence(err); fenced {
		held, e, rerr := c.read(ctx)
		if rerr != nil || e == nil || held.Owner != c.owner || held.Incarnation != c.inc {
			return rerr // gone already, or not ours to delete
		}
		err = c.kv.Delete(ctx, PrefixMember+c.id, jetstream.LastRevision(e.Revision()))
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete member record: %w", err)
	}
	return nil
}

// read returns the record and its entry, or a nil entry if there is none.
// An undecodable record counts as another owner's.
func (c *MemberClaim) read(ctx context.Context) (MemberRecord, jetstream.KeyValueEntry, error) {
	e, err := c.kv.Get(ctx, PrefixMember+c.id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return MemberRecord{}, nil, nil
	}
	if err != nil {
		return MemberRecord{}, nil, fmt.Errorf("read member record: %w", err)
	}
	var r MemberRecord
	_ = json.Unmarshal(e.Value(), &r)
	return r, e, nil
}

// publish writes value with the claim's TTL if the key is at revision rev.
func (c *MemberClaim) publish(ctx context.Context, value []byte, rev uint64) (uint64, error) {
	ack, err := c.js.Publish(ctx, keySubject(c.group, PrefixMember+c.id), value,
		jetstream.WithMsgTTL(c.ttl), jetstream.WithExpectLastSequencePerSubject(rev))
	if _, fenced := fence.WrongLastSequence(err); fenced {
		return 0, errFenced
	}
	if err != nil {
		return 0, fmt.Errorf("publish member record: %w", err)
	}
	return ack.Sequence, nil
}

// watch watches the record from revision rev for up to timeout and returns
// the first write above rev, or nil if the record went away (expired or
// deleted) or timeout passed.
func (c *MemberClaim) watch(ctx context.Context, rev uint64, timeout time.Duration) (jetstream.KeyValueEntry, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := c.kv.Watch(wctx, PrefixMember+c.id)
	if err != nil {
		return nil, fmt.Errorf("watch member record: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-wctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return nil, fmt.Errorf("watch member record: stopped: %w", context.Cause(wctx))
			case e == nil || e.Revision() <= rev:
				// the end of the initial values, or the record already read
			case e.Operation() != jetstream.KeyValuePut:
				return nil, nil
			default:
				return e, nil
			}
		}
	}
}

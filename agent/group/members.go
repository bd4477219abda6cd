package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
)

// PublishMember publishes r, member record of group, with a per-message
// TTL. kv.Put would drop the TTL, so it publishes to the key's subject.
func PublishMember(ctx context.Context, js jetstream.JetStream, group string, r MemberRecord, ttl time.Duration) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode member record: %w", err)
	}
	if _, err := js.Publish(ctx, keySubject(group, PrefixMember+r.ID), b, jetstream.WithMsgTTL(ttl)); err != nil {
		return fmt.Errorf("publish member record: %w", err)
	}
	return nil
}

// DeleteMember removes member's record, so that the group sees it gone at
// once.
func DeleteMember(ctx context.Context, kv jetstream.KeyValue, member string) error {
	if err := kv.Delete(ctx, PrefixMember+member); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete member record: %w", err)
	}
	return nil
}

// ReadMembers returns the live member records.
func ReadMembers(ctx context.Context, kv jetstream.KeyValue) (map[string]MemberRecord, error) {
	out := map[string]MemberRecord{}
	lister, err := kv.ListKeysFiltered(ctx, PrefixMember+">")
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", k, err)
		}
		var r MemberRecord
		if json.Unmarshal(e.Value(), &r) == nil {
			out[strings.TrimPrefix(k, PrefixMember)] = r
		}
	}
	return out, nil
}

// ApplyMemberUpdate applies one watch event of the member records to
// members and reports whether it can change a plan. Heartbeats that only
// refresh a record, or move its local positions, do not: planning on each
// of them would cost a plan per heartbeat per member.
func ApplyMemberUpdate(members map[string]MemberRecord, e jetstream.KeyValueEntry) bool {
	if e == nil {
		return false
	}
	id := strings.TrimPrefix(e.Key(), PrefixMember)
	old, had := members[id]
	if e.Operation() != jetstream.KeyValuePut {
		delete(members, id) // deleted on exit, or expired: dead
		return had
	}
	var r MemberRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil || r.ID != id {
		return false // not a record handoff wrote; ignore it
	}
	members[id] = r
	return !had || old.Incarnation != r.Incarnation || old.Leaving != r.Leaving ||
		old.Capacity != r.Capacity || old.Zone != r.Zone || !sameReleases(old.Released, r.Released)
}

func sameReleases(a, b map[string]assign.Release) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w.Epoch != v.Epoch || w.Seq != v.Seq {
			return false
		}
	}
	return true
}

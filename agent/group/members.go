package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
)

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
		old.Capacity != r.Capacity || old.Zone != r.Zone || old.Worker != r.Worker || old.DirectHandoff != r.DirectHandoff || old.CompactGenerations != r.CompactGenerations ||
		!sameReleases(old.Released, r.Released) || !sameTakeovers(old.Takeovers, r.Takeovers)
}

func sameReleases(a, b map[string]assign.Release) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w.Epoch != v.Epoch || w.Seq != v.Seq || w.To != v.To || w.ToEpoch != v.ToEpoch {
			return false
		}
	}
	return true
}

func sameTakeovers(a, b map[string]assign.Takeover) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w.Epoch != v.Epoch {
			return false
		}
	}
	return true
}

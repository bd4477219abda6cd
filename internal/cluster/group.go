package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
)

// Group reads a group's state from NATS, as `handoff status` does, without
// going through any agent. Safe for concurrent use.
type Group struct {
	JS   jetstream.JetStream
	Name string

	mu sync.Mutex
	kv jetstream.KeyValue // once a member has created it
}

// Bucket returns the group's KV bucket; it fails until a member has
// created it.
func (g *Group) Bucket(ctx context.Context) (jetstream.KeyValue, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.kv == nil {
		kv, err := g.JS.KeyValue(ctx, group.BucketName(g.Name))
		if err != nil {
			return nil, fmt.Errorf("open the group's bucket: %w", err)
		}
		g.kv = kv
	}
	return g.kv, nil
}

// Read reads the group's view: its members, generation and tasks.
func (g *Group) Read(ctx context.Context) (api.GroupView, error) {
	kv, err := g.Bucket(ctx)
	if err != nil {
		return api.GroupView{}, err
	}
	return group.ReadGroup(ctx, kv, g.Name, nil)
}

// Positions reads how far member's local copy of each task reaches, as
// its member record reports it to the leader (the "positions" of the
// record under members.<id>, see docs/ARCHITECTURE.md).
func (g *Group) Positions(ctx context.Context, member string) (map[string]uint64, error) {
	kv, err := g.Bucket(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, group.PrefixMember+member)
	if err != nil {
		return nil, fmt.Errorf("read the record of %s: %w", member, err)
	}
	var rec struct {
		Positions map[string]uint64 `json:"positions"`
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, fmt.Errorf("decode the record of %s: %w", member, err)
	}
	return rec.Positions, nil
}

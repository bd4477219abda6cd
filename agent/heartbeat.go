package agent

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
)

// runHeartbeat keeps the member record alive: it republishes it with a TTL
// of the session timeout every third of that timeout, and at once when the
// record changes (a release, a leave).
func (a *Agent) runHeartbeat(ctx context.Context) error {
	ttl := a.config().SessionTimeout.D()
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		if err := a.publishRecord(ctx, ttl); err != nil && ctx.Err() == nil {
			a.log.Warn().Err(err).Msg("heartbeat failed; retrying")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.hbKick:
		}
	}
}

// publishRecord publishes the member record with a per-message TTL.
func (a *Agent) publishRecord(ctx context.Context, ttl time.Duration) error {
	return group.PublishMember(ctx, a.js, a.opts.Group, a.record(), ttl)
}

// record builds the member record from the runtime state.
func (a *Agent) record() group.MemberRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := group.MemberRecord{
		ID:          a.opts.MemberID,
		Incarnation: a.incarnation,
		Addr:        a.opts.Addr,
		Zone:        a.opts.Zone,
		Capacity:    a.opts.Capacity,
		Leaving:     a.leavingSince != nil,
		Started:     a.started,
		Generation:  a.generation,
	}
	if len(a.positions) > 0 {
		r.Positions = make(map[string]uint64, len(a.positions))
		for k, v := range a.positions {
			r.Positions[k] = v
		}
	}
	for _, t := range a.tasks {
		if p := t.position(); p > 0 {
			if r.Positions == nil {
				r.Positions = map[string]uint64{}
			}
			r.Positions[t.id] = p
		}
	}
	if len(a.releases) > 0 {
		r.Released = make(map[string]assign.Release, len(a.releases))
		for k, v := range a.releases {
			r.Released[k] = v
		}
	}
	return r
}

// runConfigWatch follows changes of the group config ('handoff group set').
func (a *Agent) runConfigWatch(ctx context.Context) error {
	a.watchKey(ctx, group.KeyConfig, func(e jetstream.KeyValueEntry) error {
		if e.Operation() != jetstream.KeyValuePut {
			return nil
		}
		var cfg assign.Config
		if err := json.Unmarshal(e.Value(), &cfg); err != nil {
			a.log.Error().Err(err).Uint64(fRevision, e.Revision()).Msg("ignoring undecodable group config")
			return nil
		}
		if len(a.config().Diff(cfg)) == 0 {
			return nil // the config in force (the watch starts with it)
		}
		if err := a.setConfig(cfg); err != nil {
			a.log.Error().Err(err).Msg("ignoring invalid group config")
			return nil
		}
		a.log.Info().Uint64(fRevision, e.Revision()).Msg("group config changed")
		a.kickLeader()
		return nil
	})
	return nil
}

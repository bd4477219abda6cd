package agent

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
)

// runHeartbeat keeps the member record alive: it republishes it with a TTL
// of the session timeout every half of that timeout, and at once when the
// record changes (a release, a leave). Each try is bounded by a quarter of
// the timeout, and a failed one is tried again an eighth of the timeout
// after it began (at once if it took that long): the record gets two
// tries before it can expire, as with a beat every third of the timeout,
// at two thirds of the messages (an idle member's NATS traffic is mostly
// its heartbeat). It returns a *group.MemberTakenError if another agent
// took the member ID over (this one was cut off past the session timeout):
// the agent must stop.
func (a *Agent) runHeartbeat(ctx context.Context) error {
	ttl := a.config().SessionTimeout.D()
	t := time.NewTicker(ttl / 2)
	defer t.Stop()
	for {
		// Bounded, so that a publish whose acknowledgement is lost (NATS
		// restarting) is retried within the TTL rather than after the
		// client's 5 s timeout, when the record has expired.
		start := time.Now()
		hctx, cancel := context.WithTimeout(ctx, ttl/4)
		err := a.claim.Refresh(hctx, a.record())
		cancel()
		if err == nil {
			// The record lives a TTL from when the server stored it,
			// which is after this try began.
			a.refreshed.Store(start.UnixNano())
		}
		var taken *group.MemberTakenError
		if errors.As(err, &taken) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			a.log.Warn().Err(err).Msg("heartbeat failed; retrying")
			if !group.Sleep(ctx, max(0, ttl/8-time.Since(start))) {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.hbKick:
		}
	}
}

// sessionLive reports whether this member's record was refreshed recently
// enough (a try that began within three quarters of a session timeout, on
// this process's clock, succeeded) that the group cannot have counted it
// dead: a process that was paused, or cut off from NATS, must not trust
// what it received before. A beat every half timeout keeps it true; a
// quarter of a timeout is left as margin for what the caller does next.
func (a *Agent) sessionLive() bool {
	last := a.refreshed.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < a.config().SessionTimeout.D()*3/4
}

// claimMemberID takes the member ID for this agent (group.ClaimMember)
// before it does anything in the group: it fails while a live agent of
// another data dir holds the ID.
func (a *Agent) claimMemberID(ctx context.Context) (*group.MemberClaim, error) {
	ttl := a.config().SessionTimeout.D()
	c, err := group.ClaimMember(ctx, a.js, a.kv, a.opts.Group, a.record(), ttl, group.ClaimOptions{
		Waiting: func(h group.MemberRecord) {
			a.log.Info().Str(fHolder, h.Incarnation).Str(fHost, h.Host).Dur("timeout", ttl+ttl/2).
				Msg("member ID held by an agent with another data dir; waiting to see whether it is alive")
		},
	})
	if err != nil {
		return nil, err
	}
	if prev := c.Replaced(); prev != "" {
		a.log.Info().Str(fHolder, prev).Msg("took over the member record of this data dir's previous run")
	}
	return c, nil
}

// record builds the member record from the runtime state.
func (a *Agent) record() group.MemberRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := group.MemberRecord{
		ID:          a.opts.MemberID,
		Incarnation: a.incarnation,
		Owner:       a.owner,
		Host:        a.host,
		Addr:        a.opts.Addr,
		Zone:        a.opts.Zone,
		Capacity:    a.opts.Capacity,
		Leaving:     a.leavingSince != nil,
		Started:     a.started,
		Generation:  a.generation,

		DirectHandoff:      true,
		CompactGenerations: true,
	}
	r.Worker, r.WorkerSince = a.worker.state, a.worker.since
	for _, t := range a.tasks {
		if p := t.position(); p > 0 {
			if r.Positions == nil {
				r.Positions = map[string]uint64{}
			}
			r.Positions[t.id] = p
		}
		t.mu.Lock()
		if t.release != nil {
			if r.Released == nil {
				r.Released = map[string]assign.Release{}
			}
			r.Released[t.id] = *t.release
		}
		if t.takeover != nil {
			if r.Takeovers == nil {
				r.Takeovers = map[string]assign.Takeover{}
			}
			r.Takeovers[t.id] = *t.takeover
		}
		t.mu.Unlock()
	}
	return r
}

// applyConfig applies a change of the group config ('handoff group set'),
// as the member loop's watch delivers it.
func (a *Agent) applyConfig(e jetstream.KeyValueEntry) {
	var cfg assign.Config
	if err := json.Unmarshal(e.Value(), &cfg); err != nil {
		a.log.Error().Err(err).Uint64(fRevision, e.Revision()).Msg("ignoring undecodable group config")
		return
	}
	if len(a.config().Diff(cfg)) == 0 {
		return // the config in force (the watch starts with it)
	}
	if err := a.setConfig(cfg); err != nil {
		a.log.Error().Err(err).Msg("ignoring invalid group config")
		return
	}
	a.log.Info().Uint64(fRevision, e.Revision()).Msg("group config changed")
	a.kickLeader()
}

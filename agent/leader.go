package agent

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
)

// pairKey names a task on a member.
type pairKey struct{ task, member string }

// leaderState is what the leader keeps between plans.
type leaderState struct {
	current assign.Assignment
	pub     *group.Publisher
	members map[string]group.MemberRecord
	// since holds, for each learner and standby, the generation from
	// which it has held that role: only its reports from then on count.
	since map[pairKey]uint64
}

// lead runs the leader loop while l holds: it plans on every relevant event
// and publishes each new generation. It returns when ctx ends or the lease
// is lost.
func (a *Agent) lead(ctx context.Context, l *group.Lease) error {
	st, err := a.loadLeaderState(ctx)
	if err != nil {
		return err
	}
	rewatch := a.rewatchSignal() // before watching: a reconnect after it rewatches
	mw, err := a.watchMembers(ctx, st)
	if err != nil {
		return err
	}
	defer func() {
		if mw != nil {
			_ = mw.Stop()
		}
	}()
	st.track()
	a.awaiting.Store(st.awaiting())
	a.log.Info().Uint64(fGeneration, st.current.Generation).Int("members", len(st.members)).Msg("leading")

	var deadline *time.Timer
	for {
		next, err := a.planAndPublish(ctx, l, st)
		if err != nil {
			if errors.Is(err, group.ErrLeaseLost) || ctx.Err() != nil {
				return err
			}
			a.log.Warn().Err(err).Msg("publish generation failed; retrying")
			if !group.Sleep(ctx, 100*time.Millisecond) {
				return nil
			}
			continue
		}
		var deadlineC <-chan time.Time
		if !next.IsZero() {
			// A deadline in the past would spin the loop.
			next = maxTime(next, time.Now().Add(10*time.Millisecond))
			if deadline == nil {
				deadline = time.NewTimer(time.Until(next))
				defer deadline.Stop()
			} else {
				deadline.Reset(time.Until(next))
			}
			deadlineC = deadline.C
		}
		// Wait for something that can change the plan, then drain whatever
		// else is pending so that a burst of events costs one plan.
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-rewatch:
				// NATS came back: the old watcher may be stale.
				_ = mw.Stop()
				rewatch = a.rewatchSignal()
				if mw, err = a.watchMembers(ctx, st); err != nil {
					return err
				}
				break wait
			case e, ok := <-mw.Updates():
				if !ok {
					// The watch ended with its connection: watch again
					// and plan on a fresh, complete view.
					rewatch = a.rewatchSignal()
					if mw, err = a.watchMembers(ctx, st); err != nil {
						return err
					}
					break wait
				}
				if group.ApplyMemberUpdate(st.members, e) {
					break wait
				}
			case <-a.leaderKick:
				break wait
			case <-deadlineC:
				break wait
			}
		}
	drain:
		for {
			select {
			case e, ok := <-mw.Updates():
				if !ok {
					break drain // the wait above watches again
				}
				group.ApplyMemberUpdate(st.members, e)
			case <-a.leaderKick:
			default:
				break drain
			}
		}
	}
}

// planAndPublish plans once and publishes the result if it changed
// anything. It returns the plan's next deadline.
func (a *Agent) planAndPublish(ctx context.Context, l *group.Lease, st *leaderState) (time.Time, error) {
	cfg := a.config()
	ids := make([]string, 0, len(st.members))
	for id := range st.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	members := make([]assign.Member, 0, len(ids))
	for _, id := range ids {
		members = append(members, st.members[id].AssignMember())
	}
	in := assign.Input{
		Config:  cfg,
		Now:     time.Now(),
		Members: members,
		Current: st.current,
		Lags:    a.progress.lags(st.since),
	}
	t0 := time.Now()
	res := assign.Plan(in)
	a.metrics.planSeconds.Observe(time.Since(t0).Seconds())
	if !res.Changed {
		if st.current.Generation > 0 && st.pub.Covers(ids) {
			return res.NextDeadline, nil
		}
		// Nothing moves, but a member joined or left (or the group is new):
		// a new generation gives every live member its entry, so that a
		// newcomer knows it is a member even with no task for it.
		res.Assignment.Generation = st.current.Generation + 1
	}
	g, err := st.pub.Publish(ctx, l, res, ids)
	if err != nil {
		return time.Time{}, err
	}
	a.metrics.generation.Set(float64(g.Generation))
	for _, m := range res.Moves {
		a.log.Info().Str(fTask, m.Task).Str("kind", string(m.Kind)).Str("from", m.From).Str("to", m.To).
			Str("reason", m.Reason).Uint64(fGeneration, res.Assignment.Generation).Msg("plan")
	}
	st.current = res.Assignment
	st.track()
	a.awaiting.Store(st.awaiting())
	a.observePromotions(res.Moves)
	return res.NextDeadline, nil
}

// track records from which generation each learner and standby of the
// current assignment has held its role.
func (st *leaderState) track() {
	now := map[pairKey]bool{}
	for id, t := range st.current.Tasks {
		for _, l := range t.Learners {
			now[pairKey{id, l.Member}] = true
		}
		for _, s := range t.Standbys {
			now[pairKey{id, s}] = true
		}
	}
	for k := range st.since {
		if !now[k] {
			delete(st.since, k)
		}
	}
	for k := range now {
		if _, ok := st.since[k]; !ok {
			st.since[k] = st.current.Generation
		}
	}
}

// awaiting is the set of learners whose catching up would change the plan:
// those of tasks not yet being revoked.
func (st *leaderState) awaiting() *map[pairKey]bool {
	w := map[pairKey]bool{}
	for id, t := range st.current.Tasks {
		if t.Revoke != nil {
			continue
		}
		for _, l := range t.Learners {
			w[pairKey{id, l.Member}] = true
		}
	}
	return &w
}

// loadLeaderState reads the last published generation and its
// assignments.
func (a *Agent) loadLeaderState(ctx context.Context) (*leaderState, error) {
	pub, current, err := group.LoadPublisher(ctx, a.kv, a.opts.MemberID)
	if err != nil {
		return nil, err
	}
	return &leaderState{current: current, pub: pub, members: map[string]group.MemberRecord{}, since: map[pairKey]uint64{}}, nil
}

// watchMembers watches the member records and fills st.members with a
// complete view: the watcher delivers every current record, then a nil
// marker. The leader plans only on a complete view.
func (a *Agent) watchMembers(ctx context.Context, st *leaderState) (jetstream.KeyWatcher, error) {
	for {
		mw, err := a.kv.Watch(ctx, group.PrefixMember+">")
		if err == nil {
			clear(st.members)
			if err = readInitialMembers(ctx, mw, st.members); err == nil {
				return mw, nil
			}
			_ = mw.Stop()
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		a.log.Warn().Err(err).Msg("watch members failed; retrying")
		group.Sleep(ctx, 250*time.Millisecond)
	}
}

// readInitialMembers fills members from a fresh watcher until its nil
// marker.
func readInitialMembers(ctx context.Context, w jetstream.KeyWatcher, members map[string]group.MemberRecord) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("members watch closed")
			}
			if e == nil {
				return nil
			}
			group.ApplyMemberUpdate(members, e)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

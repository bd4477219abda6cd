package agent

import (
	"bytes"
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

// leaderState is what the leader keeps between plans.
type leaderState struct {
	current assign.Assignment
	// entries holds the last published bytes and revision of each member's
	// entry, so that unchanged entries are not rewritten.
	entries map[string]publishedEntry
	members map[string]memberRecord
	// since holds, for each learner and standby, the generation from
	// which it has held that role: only its reports from then on count.
	since map[pairKey]uint64
}

type publishedEntry struct {
	data []byte
	rev  uint64
}

// lead runs the leader loop while l holds: it plans on every relevant event
// and publishes each new generation. It returns when ctx ends or the lease
// is lost.
func (a *Agent) lead(ctx context.Context, l *lease) error {
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
			if errors.Is(err, errLeaseLost) || ctx.Err() != nil {
				return err
			}
			a.log.Warn().Err(err).Msg("publish generation failed; retrying")
			if !sleepCtx(ctx, 100*time.Millisecond) {
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
				if applyMemberUpdate(st.members, e) {
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
				applyMemberUpdate(st.members, e)
			case <-a.leaderKick:
			default:
				break drain
			}
		}
	}
}

// planAndPublish plans once and publishes the result if it changed
// anything. It returns the plan's next deadline.
func (a *Agent) planAndPublish(ctx context.Context, l *lease, st *leaderState) (time.Time, error) {
	cfg := a.config()
	ids := make([]string, 0, len(st.members))
	for id := range st.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	members := make([]assign.Member, 0, len(ids))
	for _, id := range ids {
		members = append(members, st.members[id].assignMember())
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
		if st.current.Generation > 0 && sameKeys(st.entries, ids) {
			return res.NextDeadline, nil
		}
		// Nothing moves, but a member joined or left (or the group is new):
		// a new generation gives every live member its entry, so that a
		// newcomer knows it is a member even with no task for it.
		res.Assignment.Generation = st.current.Generation + 1
	}
	if err := a.publish(ctx, l, st, res, ids); err != nil {
		return time.Time{}, err
	}
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

// publish writes the changed member entries and then the generation record,
// all fenced on the lease.
func (a *Agent) publish(ctx context.Context, l *lease, st *leaderState, res assign.Result, live []string) error {
	entries, unassigned := splitAssignment(res.Assignment, live, res.Shutdown)
	revs := make(map[string]uint64, len(entries))
	for id, e := range entries {
		data, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode entry of %s: %w", id, err)
		}
		if p, ok := st.entries[id]; ok && bytes.Equal(p.data, data) {
			revs[id] = p.rev
			continue
		}
		rev, err := l.put(ctx, prefixEntry+id, data)
		if err != nil {
			return err
		}
		st.entries[id] = publishedEntry{data: data, rev: rev}
		revs[id] = rev
	}
	for id := range st.entries {
		if _, ok := entries[id]; !ok {
			delete(st.entries, id)
		}
	}
	g := genRecord{
		Generation: res.Assignment.Generation,
		Leader:     a.opts.MemberID,
		Published:  time.Now(),
		Entries:    revs,
		Unassigned: unassigned,
		Leaving:    res.Assignment.Leaving,
		Round:      res.Assignment.Round,
		Shutdown:   res.Shutdown,
	}
	data, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("encode generation %d: %w", g.Generation, err)
	}
	if _, err := l.put(ctx, keyGen, data); err != nil {
		return err
	}
	a.metrics.generation.Set(float64(g.Generation))
	return nil
}

// splitAssignment cuts an assignment into one entry per member (every live
// member gets one, even an empty one) and the tasks nobody owns.
func splitAssignment(as assign.Assignment, live []string, shutdown []string) (map[string]*memberEntry, map[string]*assign.TaskAssignment) {
	entries := make(map[string]*memberEntry, len(live))
	entry := func(id string) *memberEntry {
		e, ok := entries[id]
		if !ok {
			e = &memberEntry{Member: id}
			entries[id] = e
		}
		return e
	}
	for _, id := range live {
		entry(id)
	}
	unassigned := map[string]*assign.TaskAssignment{}
	for _, id := range sortedKeys(as.Tasks) {
		t := as.Tasks[id]
		if t.Active == "" {
			unassigned[id] = t
		} else {
			e := entry(t.Active)
			if e.Tasks == nil {
				e.Tasks = map[string]*assign.TaskAssignment{}
			}
			e.Tasks[id] = t
		}
		for _, ln := range t.Learners {
			e := entry(ln.Member)
			e.Learning = append(e.Learning, id)
		}
		for _, s := range t.Standbys {
			e := entry(s)
			e.Standby = append(e.Standby, id)
		}
	}
	for m := range as.Leaving {
		if e, ok := entries[m]; ok {
			e.Leaving = true
		}
	}
	for _, m := range shutdown {
		if e, ok := entries[m]; ok {
			e.Shutdown = true
		}
	}
	if len(unassigned) == 0 {
		unassigned = nil
	}
	return entries, unassigned
}

// mergeAssignment is the inverse of splitAssignment.
func mergeAssignment(g genRecord, entries map[string]memberEntry) assign.Assignment {
	as := assign.Assignment{
		Generation: g.Generation,
		Tasks:      map[string]*assign.TaskAssignment{},
		Leaving:    g.Leaving,
		Round:      g.Round,
	}
	for id, t := range g.Unassigned {
		as.Tasks[id] = t
	}
	for _, e := range entries {
		for id, t := range e.Tasks {
			as.Tasks[id] = t
		}
	}
	return as
}

// loadLeaderState reads the last published generation and its entries.
func (a *Agent) loadLeaderState(ctx context.Context) (*leaderState, error) {
	st := &leaderState{entries: map[string]publishedEntry{}, members: map[string]memberRecord{}, since: map[pairKey]uint64{}}
	g, ok, err := readGen(ctx, a.kv)
	if err != nil {
		return nil, err
	}
	if !ok {
		st.current = assign.Assignment{Tasks: map[string]*assign.TaskAssignment{}}
		return st, nil
	}
	entries := make(map[string]memberEntry, len(g.Entries))
	for id, rev := range g.Entries {
		data, e, err := readEntry(ctx, a.kv, id, rev)
		if err != nil {
			return nil, err
		}
		entries[id] = e
		st.entries[id] = publishedEntry{data: data, rev: rev}
	}
	st.current = mergeAssignment(g, entries)
	return st, nil
}

func readGen(ctx context.Context, kv jetstream.KeyValue) (genRecord, bool, error) {
	e, err := kv.Get(ctx, keyGen)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return genRecord{}, false, nil
	}
	if err != nil {
		return genRecord{}, false, fmt.Errorf("read generation record: %w", err)
	}
	var g genRecord
	if err := json.Unmarshal(e.Value(), &g); err != nil {
		return genRecord{}, false, fmt.Errorf("decode generation record (revision %d): %w", e.Revision(), err)
	}
	return g, true, nil
}

func readEntry(ctx context.Context, kv jetstream.KeyValue, member string, rev uint64) ([]byte, memberEntry, error) {
	e, err := kv.GetRevision(ctx, prefixEntry+member, rev)
	if err != nil {
		return nil, memberEntry{}, fmt.Errorf("read entry of %s at revision %d: %w", member, rev, err)
	}
	var me memberEntry
	if err := json.Unmarshal(e.Value(), &me); err != nil {
		return nil, memberEntry{}, fmt.Errorf("decode entry of %s at revision %d: %w", member, rev, err)
	}
	return e.Value(), me, nil
}

// watchMembers watches the member records and fills st.members with a
// complete view: the watcher delivers every current record, then a nil
// marker. The leader plans only on a complete view.
func (a *Agent) watchMembers(ctx context.Context, st *leaderState) (jetstream.KeyWatcher, error) {
	for {
		mw, err := a.kv.Watch(ctx, prefixMember+">")
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
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

// readInitialMembers fills members from a fresh watcher until its nil
// marker.
func readInitialMembers(ctx context.Context, w jetstream.KeyWatcher, members map[string]memberRecord) error {
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
			applyMemberUpdate(members, e)
		}
	}
}

// applyMemberUpdate applies one watch event to the live members and
// reports whether it can change a plan. Heartbeats that only refresh a
// record, or move its local positions, do not: planning on each of them
// would cost a plan per heartbeat per member.
func applyMemberUpdate(members map[string]memberRecord, e jetstream.KeyValueEntry) bool {
	if e == nil {
		return false
	}
	id := strings.TrimPrefix(e.Key(), prefixMember)
	old, had := members[id]
	if e.Operation() != jetstream.KeyValuePut {
		delete(members, id) // deleted on exit, or expired: dead
		return had
	}
	var r memberRecord
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

// sameKeys reports whether m's keys are exactly ids.
func sameKeys[V any](m map[string]V, ids []string) bool {
	if len(m) != len(ids) {
		return false
	}
	for _, id := range ids {
		if _, ok := m[id]; !ok {
			return false
		}
	}
	return true
}

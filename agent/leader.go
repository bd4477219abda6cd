package agent

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
)

// publishBatchFrom is the fewest changed assignments a leader writes in
// atomic batches (group.BatchFrom; tests lower it, export_test.go).
var publishBatchFrom = group.BatchFrom

// pairKey names a task on a member.
type pairKey struct{ task, member string }

// leader is what a member keeps while it leads, and only then (in the
// manner of hashicorp/raft's leaderState): holdLease makes one when the
// member wins the lease, publishes it on Agent.leader, and drops it when
// the lease ends, so no leader state outlives a leadership. Its run loop
// plans on every relevant event and publishes each new generation.
//
// The run loop alone touches current, since, pub and batchRefused. members
// is written by the members watch and read by plans, under mu. awaiting is
// written by the run loop and read by onReport (the progress subscription)
// through an atomic pointer; caughtAt is shared by the two under caughtMu.
type leader struct {
	a    *Agent
	l    *group.Lease
	kick chan struct{}

	pub          *group.Publisher
	batchRefused bool // the server refused an atomic batch (logged once)
	current      assign.Assignment
	// since holds, for each learner and standby, the generation from
	// which it has held that role: only its reports from then on count.
	since map[pairKey]uint64

	mu       sync.Mutex
	members  map[string]group.MemberRecord
	complete bool // members holds every live record (the watch delivered them all)

	// awaiting holds the learners the leader waits on to catch up; a
	// report from one of them that has caught up wakes the leader.
	awaiting atomic.Pointer[map[pairKey]bool]
	caughtMu sync.Mutex
	caughtAt map[pairKey]time.Time // when an awaited learner was first heard caught up
}

func newLeader(a *Agent, l *group.Lease) *leader {
	return &leader{
		a:        a,
		l:        l,
		kick:     make(chan struct{}, 1),
		since:    map[pairKey]uint64{},
		members:  map[string]group.MemberRecord{},
		caughtAt: map[pairKey]time.Time{},
	}
}

// wake makes the run loop plan again.
func (ld *leader) wake() {
	select {
	case ld.kick <- struct{}{}:
	default:
	}
}

// run leads while the lease holds: it reads the last published generation,
// watches the member records, and plans whenever they, the config or a
// learner's progress may change the plan, or the plan's deadline passes.
// It returns when ctx ends or the lease is lost.
func (ld *leader) run(ctx context.Context) error {
	a := ld.a
	pub, current, err := group.LoadPublisher(ctx, a.kv, a.opts.MemberID)
	if err != nil {
		return err
	}
	pub.BatchFrom = publishBatchFrom
	pub.AfterWrite = func(key string) {
		if f := a.afterPublishWrite.Load(); f != nil {
			(*f)(key)
		}
	}
	ld.pub, ld.current = pub, current
	ld.track()

	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ld.watchMembers(wctx)
	}()
	defer wg.Wait()
	defer stopWatch()

	var (
		deadline  *time.Timer
		deadlineC <-chan time.Time
		announced bool
	)
	for {
		if n, ok := ld.memberCount(); ok {
			if !announced {
				a.log.Info().Uint64(fGeneration, ld.current.Generation).Int("members", n).Msg("leading")
				announced = true
			}
			next, err := ld.planAndPublish(ctx)
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
			deadlineC = nil
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
		}
		// Wait for something that can change the plan. Events that come
		// meanwhile leave one wake-up pending, so a burst costs one plan.
		select {
		case <-ctx.Done():
			return nil
		case <-ld.kick:
		case <-deadlineC:
		}
	}
}

// watchMembers keeps members current until ctx ends. The leader plans only
// on a complete view: after every fresh watch, once the watch has delivered
// every current record.
func (ld *leader) watchMembers(ctx context.Context) {
	group.Watch{
		KV:       ld.a.kv,
		Key:      group.PrefixMember + ">",
		Rewatch:  ld.a.rewatchSignal,
		Log:      ld.a.log,
		Complete: true,
		Reset: func() {
			ld.mu.Lock()
			clear(ld.members)
			ld.complete = false
			ld.mu.Unlock()
		},
		Update: func(e jetstream.KeyValueEntry) error {
			seen := time.Now()
			ld.mu.Lock()
			wake := false
			var (
				id       string
				released map[string]assign.Release
			)
			if e == nil {
				ld.complete, wake = true, true
			} else {
				id = strings.TrimPrefix(e.Key(), group.PrefixMember)
				old := ld.members[id]
				wake = group.ApplyMemberUpdate(ld.members, e) && ld.complete
				if ld.complete { // the current records a fresh watch delivers hold no news
					released = newReleases(old, ld.members[id])
				}
			}
			ld.mu.Unlock()
			if wake {
				ld.wake()
			}
			for task, r := range released { // after the wake: the plan need not wait for the log
				ld.a.log.Info().Str(fTask, task).Uint64(fEpoch, r.Epoch).Str("from", id).
					Str(fSeen, stamp(seen)).Msg("release seen")
			}
			return nil
		},
	}.Run(ctx)
}

// memberCount returns how many members are live, and whether the view of
// them is complete.
func (ld *leader) memberCount() (int, bool) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return len(ld.members), ld.complete
}

// liveMembers returns the live members, sorted by ID, as the assignor
// sees them.
func (ld *leader) liveMembers() ([]string, []assign.Member) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ids := make([]string, 0, len(ld.members))
	for id := range ld.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	members := make([]assign.Member, 0, len(ids))
	for _, id := range ids {
		members = append(members, ld.members[id].AssignMember())
	}
	return ids, members
}

// compact reports whether every live member reads compact generations
// (a member of an earlier version reads only full ones).
func (ld *leader) compact() bool {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	for _, r := range ld.members {
		if !r.CompactGenerations {
			return false
		}
	}
	return true
}

// planAndPublish plans once and publishes the result if it changed
// anything. It returns the plan's next deadline.
func (ld *leader) planAndPublish(ctx context.Context) (time.Time, error) {
	a := ld.a
	ids, members := ld.liveMembers()
	in := assign.Input{
		Config:  a.config(),
		Now:     time.Now(),
		Members: members,
		Current: ld.current,
		Lags:    a.progress.lags(ld.since),
	}
	t0 := time.Now()
	res := assign.Plan(in)
	planned := time.Since(t0)
	a.metrics.planSeconds.Observe(planned.Seconds())
	if !res.Changed {
		if ld.current.Generation > 0 && ld.pub.Covers(ids) {
			a.metrics.setLeading(len(ids), ld.current)
			return res.NextDeadline, nil
		}
		// Nothing moves, but a member joined or left (or the group is new):
		// a new generation gives every live member its assignment, so that
		// a newcomer knows it is a member even with no task for it.
		res.Assignment.Generation = ld.current.Generation + 1
	}
	t1 := time.Now()
	g, st, err := ld.pub.Publish(ctx, ld.l, res, ids, ld.compact())
	if st.Refused != nil && !ld.batchRefused {
		ld.batchRefused = true // once a leadership: an older agent's start may reset the bucket's setting for a while
		a.log.Info().Err(st.Refused).Msg("the server refused an atomic batch of assignments; writing them one by one")
	}
	if err != nil {
		return time.Time{}, err
	}
	published := time.Since(t1)
	a.metrics.generation.Set(float64(g.Generation))
	a.log.Info().Uint64(fGeneration, g.Generation).Int("members", len(ids)).Int("moves", len(res.Moves)).Int("writes", st.Writes).
		Int("batches", st.Batches).Dur("plan", planned).Dur("publish", published).Msg("generation published")
	for _, m := range res.Moves {
		a.log.Info().Str(fTask, m.Task).Str("kind", string(m.Kind)).Str("from", m.From).Str("to", m.To).
			Str("reason", m.Reason).Uint64(fGeneration, res.Assignment.Generation).Msg("plan")
	}
	ld.current = res.Assignment
	a.metrics.setLeading(len(ids), ld.current)
	ld.track()
	ld.observePromotions(res.Moves)
	if activates(res.Moves) {
		// A task activated in a plan stays put in it, so moves it made
		// necessary (balance after a promotion) wait for the next plan:
		// make one at once rather than wait for an event that may not come.
		return time.Now(), nil
	}
	return res.NextDeadline, nil
}

// activates reports whether moves give a task a new owner.
func activates(moves []assign.Move) bool {
	for _, m := range moves {
		switch m.Kind {
		case assign.MovePromote, assign.MoveFailover, assign.MoveAssign:
			return true
		}
	}
	return false
}

// track records from which generation each learner and standby of the
// current assignment has held its role, and which learners the leader
// awaits: those of tasks not yet being revoked, whose catching up would
// change the plan.
func (ld *leader) track() {
	now := map[pairKey]bool{}
	awaiting := map[pairKey]bool{}
	for id, t := range ld.current.Tasks {
		for _, l := range t.Learners {
			now[pairKey{id, l.Member}] = true
			if t.Revoke == nil {
				awaiting[pairKey{id, l.Member}] = true
			}
		}
		for _, s := range t.Standbys {
			now[pairKey{id, s}] = true
		}
	}
	for k := range ld.since {
		if !now[k] {
			delete(ld.since, k)
		}
	}
	for k := range now {
		if _, ok := ld.since[k]; !ok {
			ld.since[k] = ld.current.Generation
		}
	}
	ld.awaiting.Store(&awaiting)
}

// onReport wakes the leader when a learner it waits on reports a lag within
// the acceptable lag. It runs on the progress subscription's goroutine.
func (ld *leader) onReport(p group.Progress) {
	w := ld.awaiting.Load()
	if w == nil || !(*w)[pairKey{p.Task, p.Member}] || p.Lag > ld.a.config().AcceptableLag {
		return
	}
	ld.caughtMu.Lock()
	if _, ok := ld.caughtAt[pairKey{p.Task, p.Member}]; !ok {
		ld.caughtAt[pairKey{p.Task, p.Member}] = time.Now()
	}
	ld.caughtMu.Unlock()
	ld.wake()
}

// observePromotions records, for each revoke a plan started, how long
// after its learner was heard to have caught up the revoke was published.
func (ld *leader) observePromotions(moves []assign.Move) {
	now := time.Now()
	ld.caughtMu.Lock()
	defer ld.caughtMu.Unlock()
	for _, m := range moves {
		k := pairKey{m.Task, m.To}
		if t, ok := ld.caughtAt[k]; ok && m.Kind == assign.MoveRevoke {
			ld.a.metrics.promotionDelay.Observe(now.Sub(t).Seconds())
			delete(ld.caughtAt, k)
		}
	}
	// Forget learners that are no longer awaited.
	if w := ld.awaiting.Load(); w != nil {
		for k := range ld.caughtAt {
			if !(*w)[k] {
				delete(ld.caughtAt, k)
			}
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// newReleases returns the releases rec holds that old did not: each
// release a member record brings the leader for the first time.
func newReleases(old, rec group.MemberRecord) map[string]assign.Release {
	var out map[string]assign.Release
	for task, r := range rec.Released {
		if o, ok := old.Released[task]; ok && o.Epoch == r.Epoch {
			continue
		}
		if out == nil {
			out = map[string]assign.Release{}
		}
		out[task] = r
	}
	return out
}

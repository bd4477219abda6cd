package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/handoffhq/handoff/agent/group"
)

// progressBook keeps the latest progress of every learner and standby in
// the group, as published over core NATS, and passes every report to
// onReport (the leader decides whether it can change a plan).
type progressBook struct {
	onReport func(group.Progress)

	mu     sync.Mutex
	byTask map[string]map[string]group.Progress
}

func newProgressBook(onReport func(group.Progress)) *progressBook {
	return &progressBook{onReport: onReport, byTask: map[string]map[string]group.Progress{}}
}

// add records p.
func (b *progressBook) add(p group.Progress) {
	b.mu.Lock()
	m, ok := b.byTask[p.Task]
	if !ok {
		m = map[string]group.Progress{}
		b.byTask[p.Task] = m
	}
	m[p.Member] = p
	b.mu.Unlock()
	b.onReport(p)
}

// lags returns task -> member -> lag for the assignor, counting only
// reports made at or after the generation from which each pair has been
// learning (since), so that a report from an earlier stint of a learner
// never promotes it.
func (b *progressBook) lags(since map[pairKey]uint64) map[string]map[string]uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]map[string]uint64, len(b.byTask))
	for task, m := range b.byTask {
		for member, p := range m {
			g, ok := since[pairKey{task, member}]
			if !ok || p.Generation < g {
				continue
			}
			lm, ok := out[task]
			if !ok {
				lm = map[string]uint64{}
				out[task] = lm
			}
			lm[member] = p.Lag
		}
	}
	return out
}

// all returns every recorded progress.
func (b *progressBook) all() []group.Progress {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []group.Progress
	for _, m := range b.byTask {
		for _, p := range m {
			out = append(out, p)
		}
	}
	return out
}

// own returns member's last report of task.
func (b *progressBook) own(task, member string) (group.Progress, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.byTask[task][member]
	return p, ok
}

// forgetOthers drops every report but member's own: a member that stops
// hearing the group's reports must not keep stale ones.
func (b *progressBook) forgetOthers(member string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for task, m := range b.byTask {
		for id := range m {
			if id != member {
				delete(m, id)
			}
		}
		if len(m) == 0 {
			delete(b.byTask, task)
		}
	}
}

// forget drops progress older than maxAge: learners that stopped
// reporting (they were promoted, dropped or died).
func (b *progressBook) forget(maxAge time.Duration, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for task, m := range b.byTask {
		for member, p := range m {
			if now.Sub(p.Updated) > maxAge {
				delete(m, member)
			}
		}
		if len(m) == 0 {
			delete(b.byTask, task)
		}
	}
}

// publishProgress sends one progress report over core NATS and records it
// locally (a leader hears itself without the round trip).
func (a *Agent) publishProgress(p group.Progress) {
	a.progress.add(p)
	if err := group.PublishProgress(a.nc, a.opts.Group, a.opts.MemberID, p); err != nil {
		a.log.Debug().Err(err).Msg("publish progress")
	}
}

// progressWanted is how long after a call of Group a member that neither
// leads nor leaves keeps hearing the group's progress.
const progressWanted = time.Minute

// runProgress republishes this member's learners' and standbys' progress,
// and hears the group's reports while they are of use here: while it leads
// (the plan waits on them), while it leaves (its leave's status shows its
// tasks' learners), and for a while after a call of Group (which shows
// them). A member that does none of these does not subscribe: every report
// of every learner in the group would reach every member.
func (a *Agent) runProgress(ctx context.Context) error {
	defer a.progressSub.stop()
	defer func() { _ = a.successorSubs.set(nil, nil) }()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if err := a.followProgress(); err != nil {
			a.log.Warn().Err(err).Msg("subscribe to the group's progress")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.progressKick:
		case now := <-t.C:
			a.republishProgress()
			// Every learner reports at least every third of a session
			// timeout (above); one silent for a session timeout is gone.
			a.progress.forget(a.config().SessionTimeout.D(), now)
		}
	}
}

// followProgress subscribes to the group's progress or stops, as this
// member needs it now.
func (a *Agent) followProgress() error {
	a.mu.Lock()
	leaving := a.leavingSince != nil
	a.mu.Unlock()
	asked := time.Since(time.Unix(0, a.groupAsked.Load())) < progressWanted
	if a.leader.Load() != nil || leaving || asked {
		a.successorSubs.set(nil, nil)
		return a.progressSub.start(func() (func(), error) {
			return group.WatchProgress(a.nc, a.opts.Group, a.heardProgress)
		})
	}
	if a.progressSub.stop() {
		a.progress.forgetOthers(a.opts.MemberID)
	}
	// A member handing tasks over directly hears its successors alone
	// (revokeDueLocked waits for their copies to be current).
	return a.successorSubs.set(a.revokeTargets(), func(member string) (func(), error) {
		return group.WatchMemberProgress(a.nc, a.opts.Group, member, a.heardProgress)
	})
}

// heardProgress takes another member's report.
func (a *Agent) heardProgress(p group.Progress) {
	if p.Member != a.opts.MemberID {
		a.progress.add(p)
		a.successorReported(p)
	}
}

// revokeTargets returns the successors of this member's direct revokes of
// stateful tasks that wait for their successor's report (revokeDueLocked).
func (a *Agent) revokeTargets() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out map[string]bool
	for _, t := range a.tasks {
		t.mu.Lock()
		if rv := t.revoke; rv != nil && t.stateful && rv.target != "" && rv.epoch != 0 && time.Since(rv.since) < successorWait {
			if out == nil {
				out = map[string]bool{}
			}
			out[rv.target] = true
		}
		t.mu.Unlock()
	}
	return out
}

// subscriptions are subscriptions by member, made and ended as needed.
type subscriptions struct {
	mu     sync.Mutex
	cancel map[string]func()
}

// set holds a subscription, made with sub, for each of members, and ends
// the others; sub may be nil when members is empty.
func (s *subscriptions) set(members map[string]bool, sub func(member string) (func(), error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for m, cancel := range s.cancel {
		if !members[m] {
			cancel()
			delete(s.cancel, m)
		}
	}
	var errs []error
	for m := range members {
		if _, ok := s.cancel[m]; ok {
			continue
		}
		cancel, err := sub(m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if s.cancel == nil {
			s.cancel = map[string]func(){}
		}
		s.cancel[m] = cancel
	}
	return errors.Join(errs...)
}

// hearProgress makes this member hear the group's progress for a while,
// and waits, if it did not already, until every learner and standby has
// reported since (one republish period), or ctx ends.
func (a *Agent) hearProgress(ctx context.Context) {
	a.groupAsked.Store(time.Now().UnixNano())
	a.kickProgress()
	every := a.republishEvery()
	for ctx.Err() == nil {
		since := a.progressSub.started()
		if !since.IsZero() && time.Since(since) >= every {
			return
		}
		wait := 10 * time.Millisecond // until runProgress subscribes
		if !since.IsZero() {
			wait = every - time.Since(since)
		}
		group.Sleep(ctx, wait)
	}
}

// kickProgress makes runProgress look at once whether the member needs the
// group's progress.
func (a *Agent) kickProgress() {
	select {
	case a.progressKick <- struct{}{}:
	default:
	}
}

// subscription is a subscription that is started and stopped as needed.
type subscription struct {
	mu     sync.Mutex
	cancel func() // nil while stopped
	since  time.Time
}

// start subscribes with sub unless subscribed.
func (s *subscription) start(sub func() (func(), error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return nil
	}
	cancel, err := sub()
	if err != nil {
		return err
	}
	s.cancel, s.since = cancel, time.Now()
	return nil
}

// stop unsubscribes, and reports whether it was subscribed.
func (s *subscription) stop() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel == nil {
		return false
	}
	s.cancel()
	s.cancel = nil
	return true
}

// started is when the subscription last started; zero if it is stopped.
func (s *subscription) started() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel == nil {
		return time.Time{}
	}
	return s.since
}

// republishEvery is how often a learner's or standby's progress is
// reported again when nothing new was reported: a third of the session
// timeout, so that the leader, which forgets a report after a session
// timeout, always holds one.
func (a *Agent) republishEvery() time.Duration { return a.config().SessionTimeout.D() / 3 }

// republishProgress reports every learner and standby again whose last
// report is older than republishEvery or of an earlier generation, so
// that an idle, caught-up learner stays visible to the leader, and counts
// from the generation that made it a learner.
func (a *Agent) republishProgress() {
	a.mu.Lock()
	gen := a.generation
	var ts []*task
	for _, t := range a.tasks {
		ts = append(ts, t)
	}
	a.mu.Unlock()
	every := a.republishEvery()
	for _, t := range ts {
		t.mu.Lock()
		tailing := t.phase.tailing()
		t.mu.Unlock()
		if !tailing {
			continue
		}
		if last, ok := a.progress.own(t.id, a.opts.MemberID); ok && last.Generation == gen && time.Since(last.Updated) < every {
			continue
		}
		if r := t.replayer.Load(); r != nil {
			// A replayer that has not reported yet (still loading a
			// snapshot, or not started) knows nothing of its lag: its zero
			// progress would read as caught up and promote it.
			if p := r.Progress(); p.Reported() {
				a.onProgress(t, p)
			}
		}
	}
}

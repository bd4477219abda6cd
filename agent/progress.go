package agent

import (
	"context"
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

// runProgress subscribes to the group's progress reports until ctx ends.
func (a *Agent) runProgress(ctx context.Context) error {
	stop, err := group.WatchProgress(a.nc, a.opts.Group, func(p group.Progress) {
		if p.Member != a.opts.MemberID {
			a.progress.add(p)
			a.successorReported(p)
		}
	})
	if err != nil {
		return err
	}
	defer stop()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			a.republishProgress()
			// Every learner reports at least once a second (above); one
			// silent for a session timeout is gone.
			a.progress.forget(a.config().SessionTimeout.D(), now)
		}
	}
}

// republishProgress reports every learner and standby again, so that an
// idle, caught-up learner stays visible to the leader.
func (a *Agent) republishProgress() {
	a.mu.Lock()
	var ts []*task
	for _, t := range a.tasks {
		ts = append(ts, t)
	}
	a.mu.Unlock()
	for _, t := range ts {
		t.mu.Lock()
		tailing := t.phase.tailing()
		t.mu.Unlock()
		if !tailing {
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

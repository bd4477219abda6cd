package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/handoffhq/handoff/httpapi"
)

// progressBook keeps the latest progress of every learner and standby in
// the group, as published over core NATS, and passes every report to
// onReport (the leader decides whether it can change a plan).
type progressBook struct {
	onReport func(progressMsg)

	mu     sync.Mutex
	byTask map[string]map[string]progressMsg
}

func newProgressBook(onReport func(progressMsg)) *progressBook {
	return &progressBook{onReport: onReport, byTask: map[string]map[string]progressMsg{}}
}

// add records p.
func (b *progressBook) add(p progressMsg) {
	b.mu.Lock()
	m, ok := b.byTask[p.Task]
	if !ok {
		m = map[string]progressMsg{}
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
func (b *progressBook) all() []progressMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []progressMsg
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
			if now.Sub(p.At) > maxAge {
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
func (a *Agent) publishProgress(p progressMsg) {
	a.progress.add(p)
	b, err := json.Marshal(p)
	if err != nil {
		return
	}
	if err := a.nc.Publish(progressSubject(a.opts.Group, a.opts.MemberID), b); err != nil {
		a.log.Debug().Err(err).Msg("publish progress")
	}
}

// runProgress subscribes to the group's progress reports until ctx ends.
func (a *Agent) runProgress(ctx context.Context) error {
	sub, err := a.nc.Subscribe(progressWildcard(a.opts.Group), func(m *nats.Msg) {
		var p progressMsg
		if json.Unmarshal(m.Data, &p) != nil || p.Member == a.opts.MemberID {
			return
		}
		a.progress.add(p)
	})
	if err != nil {
		return fmt.Errorf("subscribe to progress: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
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
		role := t.role
		t.mu.Unlock()
		if role != httpapi.RoleLearner && role != httpapi.RoleStandby {
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

// WatchProgress calls fn with every progress report published in group,
// from a NATS subscription, until the returned stop is called. Learners and
// standbys report at least once a second.
func WatchProgress(nc *nats.Conn, group string, fn func(httpapi.LearnerProgress)) (stop func(), err error) {
	sub, err := nc.Subscribe(progressWildcard(group), func(m *nats.Msg) {
		var p progressMsg
		if json.Unmarshal(m.Data, &p) == nil {
			fn(p.api())
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to progress of group %s: %w", group, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

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
// the group, as published over core NATS. It wakes the leader when a
// learner crosses the acceptable lag, which is what a plan waits for.
type progressBook struct {
	onCross func()

	mu         sync.Mutex
	byTask     map[string]map[string]progressMsg
	acceptable uint64
}

func newProgressBook(onCross func()) *progressBook {
	return &progressBook{onCross: onCross, byTask: map[string]map[string]progressMsg{}}
}

func (b *progressBook) setAcceptable(lag uint64) {
	b.mu.Lock()
	b.acceptable = lag
	b.mu.Unlock()
}

// add records p and reports whether it crossed the acceptable lag either
// way (or is the first report of its learner).
func (b *progressBook) add(p progressMsg) {
	b.mu.Lock()
	m, ok := b.byTask[p.Task]
	if !ok {
		m = map[string]progressMsg{}
		b.byTask[p.Task] = m
	}
	old, had := m[p.Member]
	m[p.Member] = p
	crossed := !had || (old.Lag <= b.acceptable) != (p.Lag <= b.acceptable)
	b.mu.Unlock()
	if crossed {
		b.onCross()
	}
}

// lags returns task -> member -> lag for the assignor.
func (b *progressBook) lags() map[string]map[string]uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]map[string]uint64, len(b.byTask))
	for task, m := range b.byTask {
		lm := make(map[string]uint64, len(m))
		for member, p := range m {
			lm[member] = p.Lag
		}
		out[task] = lm
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
			a.onProgress(t, r.Progress())
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

package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
)

// Assignment implements httpapi.Backend.
func (a *Agent) Assignment() api.View {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.viewLocked()
}

// WaitAssignment implements httpapi.Backend: it returns as soon as the view
// changes past after, or the current view when ctx ends.
func (a *Agent) WaitAssignment(ctx context.Context, after uint64) api.View {
	for {
		a.mu.Lock()
		if a.version > after {
			v := a.viewLocked()
			a.mu.Unlock()
			return v
		}
		ch := a.changed
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return a.Assignment()
		case <-ch:
		}
	}
}

// stateLocked is the member's state as the worker sees it.
func (a *Agent) stateLocked() string {
	switch {
	case a.assigned.Shutdown:
		return api.StateDone
	case a.leavingSince != nil:
		return api.StateLeaving
	case !a.included:
		return api.StateJoining
	default:
		return api.StateMember
	}
}

// viewLocked builds the worker's view. Callers hold a.mu.
func (a *Agent) viewLocked() api.View {
	v := api.View{
		Member:     a.opts.MemberID,
		Generation: a.generation,
		Version:    a.version,
		State:      a.stateLocked(),
		Tasks:      []api.TaskView{},
		Revoke:     []string{},
		Shutdown:   a.assigned.Shutdown,
	}
	ids := slices.Sorted(maps.Keys(a.tasks))
	for _, id := range ids {
		t := a.tasks[id]
		t.mu.Lock()
		tv := api.TaskView{ID: id, Role: t.phase.role(), Stateful: t.stateful, Epoch: t.epoch}
		switch t.phase {
		case phaseGone:
			t.mu.Unlock()
			continue
		case phaseReleased, phaseLost:
			// Released or taken over: the worker has nothing more to do.
			t.mu.Unlock()
			continue
		case phaseActivating:
			// Becoming active: shown as learning until its copy is
			// current and fenced.
			tv.Role = api.RoleLearner
			tv.Lag = t.lag.Load()
		case phaseActive:
			if t.revoke != nil && a.revokeDueLocked(t) {
				v.Revoke = append(v.Revoke, id)
			}
		default:
			tv.Lag = t.lag.Load()
		}
		t.mu.Unlock()
		if tv.Role == api.RoleActive && t.stateful {
			if m, ok, err := a.store.Meta(id); err == nil && ok {
				tv.Checkpoint, tv.Seq = m.Checkpoint, m.Applied
			}
		}
		v.Tasks = append(v.Tasks, tv)
	}
	return v
}

// Leave implements httpapi.Backend: it marks the member leaving (once) and
// tells the leader at once.
func (a *Agent) Leave(ctx context.Context) (api.LeaveStatus, error) {
	a.mu.Lock()
	if a.leavingSince == nil {
		now := time.Now()
		a.leavingSince = &now
		a.bumpViewLocked()
		a.log.Info().Msg("leaving the group")
	}
	a.mu.Unlock()
	a.kickHeartbeat()
	a.kickProgress() // the leave's status shows its tasks' learners
	return a.LeaveStatus(), nil
}

// LeaveStatus implements httpapi.Backend.
func (a *Agent) LeaveStatus() api.LeaveStatus {
	a.mu.Lock()
	s := api.LeaveStatus{
		State:     a.stateLocked(),
		Remaining: []string{},
		Shutdown:  a.assigned.Shutdown,
	}
	if a.leavingSince != nil {
		t := *a.leavingSince
		s.Started = &t
	}
	for _, id := range slices.Sorted(maps.Keys(a.assigned.Tasks)) {
		s.Remaining = append(s.Remaining, id)
	}
	a.mu.Unlock()
	if len(s.Remaining) > 0 {
		want := make(map[string]bool, len(s.Remaining))
		for _, id := range s.Remaining {
			want[id] = true
		}
		for _, p := range a.progress.all() {
			if want[p.Task] && p.Member != a.opts.MemberID {
				s.Learners = append(s.Learners, p.LearnerProgress)
			}
		}
	}
	return s
}

// WaitDone blocks until the member may shut down after a leave, or ctx
// ends.
func (a *Agent) WaitDone(ctx context.Context) error {
	var after uint64
	for {
		v := a.WaitAssignment(ctx, after)
		if v.Shutdown {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		after = v.Version
	}
}

// Ready implements httpapi.Backend.
func (a *Agent) Ready() error {
	if err := a.store.Writable(); err != nil {
		return fmt.Errorf("local store: %w", err)
	}
	if !a.nc.IsConnected() {
		return errors.New("not connected to NATS")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.included && a.leavingSince == nil {
		return errors.New("waiting for the first generation that includes this member")
	}
	return nil
}

// Group implements httpapi.Backend.
func (a *Agent) Group(ctx context.Context) (api.GroupView, error) {
	a.hearProgress(ctx)
	var progress []api.LearnerProgress
	for _, p := range a.progress.all() {
		progress = append(progress, p.LearnerProgress)
	}
	gv, err := group.ReadGroup(ctx, a.kv, a.opts.Group, progress)
	if err != nil {
		return gv, err
	}
	if err := group.FillSnapshots(ctx, a.snaps.bucket, &gv, time.Now()); err != nil {
		// The group's view is still worth showing without them.
		a.log.Warn().Err(err).Msg("list snapshots for /group")
	}
	return gv, nil
}

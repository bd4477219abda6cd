package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
)

// desired is what a generation wants of one task on this member.
type desired struct {
	role       string
	epoch      uint64
	revoking   bool
	handoffSeq uint64
	handoffAt  time.Time
}

// runMember follows the generation record and applies this member's part
// of every new generation.
func (a *Agent) runMember(ctx context.Context) error {
	a.watchKey(ctx, group.KeyGeneration, func(e jetstream.KeyValueEntry) error {
		if e.Operation() != jetstream.KeyValuePut {
			return nil
		}
		var g group.GenerationRecord
		if err := json.Unmarshal(e.Value(), &g); err != nil {
			a.log.Error().Err(err).Uint64(fRevision, e.Revision()).Msg("ignoring undecodable generation record")
			return nil
		}
		if err := a.applyGeneration(ctx, g); err != nil {
			return fmt.Errorf("apply generation %d: %w", g.Generation, err)
		}
		return nil
	})
	return nil
}

// applyGeneration reads this member's assignment in g and reconciles the task
// runtimes with it.
func (a *Agent) applyGeneration(ctx context.Context, g group.GenerationRecord) error {
	seen := time.Now()
	a.mu.Lock()
	if g.Generation <= a.generation && a.included {
		a.mu.Unlock()
		return nil
	}
	prevRev := a.assignedRev
	prevAssigned := a.assigned
	a.mu.Unlock()

	rev, included := g.Assignments[a.opts.MemberID]
	mine := group.MemberAssignment{Member: a.opts.MemberID}
	var read time.Duration // reading this member's assignment, when it changed
	switch {
	case !included:
	case rev == prevRev:
		mine = prevAssigned
	default:
		_, e, err := group.ReadMemberAssignment(ctx, a.kv, a.opts.MemberID, rev)
		if err != nil {
			return err
		}
		mine, read = e, time.Since(seen)
	}

	want := map[string]desired{}
	for id, t := range mine.Tasks {
		want[id] = desired{
			role:       api.RoleActive,
			epoch:      t.Epoch,
			revoking:   t.Revoke != nil,
			handoffSeq: t.HandoffSeq,
			handoffAt:  t.HandoffAt,
		}
	}
	for _, id := range mine.Learning {
		want[id] = desired{role: api.RoleLearner}
	}
	for _, id := range mine.Standby {
		want[id] = desired{role: api.RoleStandby}
	}

	// Logged once a.mu is released (deferred calls run last in, first
	// out), so that the worker's long-poll does not wait for the write.
	defer a.log.Info().Uint64(fGeneration, g.Generation).Str(fSeen, stamp(seen)).Dur(fRead, read).Msg("generation applied")
	a.mu.Lock()
	defer a.mu.Unlock()
	a.generation = g.Generation
	a.assigned = mine
	a.assignedRev = rev
	if included {
		a.included = true
	}
	for id, t := range a.tasks {
		if _, ok := want[id]; !ok {
			a.dropLocked(t)
		}
	}
	for id, d := range want {
		a.reconcileLocked(id, d)
	}
	a.keepReleasesLocked(want, g.Generation)
	a.metrics.generation.Set(float64(g.Generation))
	a.bumpViewLocked()
	a.kickHeartbeat() // acknowledge the generation
	return nil
}

// keepReleasesLocked keeps the releases the generation gen still waits
// for: a release is acknowledged until its task leaves this member or is no
// longer revoked (one made for a lost worker, while its task stays here). A release still in force (the worker has not served the
// task since) answers gen's revoke too, even one issued again after a
// cancel this member never saw, so it is stamped with gen. Callers hold
// a.mu.
func (a *Agent) keepReleasesLocked(want map[string]desired, gen uint64) {
	for id, r := range a.releases {
		d, ok := want[id]
		if !a.keepWorkerReleaseLocked(id, d, ok) && (!ok || d.role != api.RoleActive || !d.revoking) {
			delete(a.releases, id)
			continue
		}
		if t := a.tasks[id]; t != nil && t.isReleased(r.Epoch) {
			r.Generation = gen
			a.releases[id] = r
		}
	}
}

// reconcileLocked moves one task's runtime to what the generation wants.
// Callers hold a.mu.
func (a *Agent) reconcileLocked(id string, d desired) {
	t, ok := a.tasks[id]
	if !ok {
		stateful, _ := a.taskKind(id)
		t = &task{id: id, stateful: stateful}
		if p, ok := a.positions[id]; ok {
			t.applied.Store(p)
		}
		a.tasks[id] = t
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch d.role {
	case api.RoleActive:
		if t.phase.owned() && t.phase != phaseLost && t.epoch == d.epoch {
			if t.revoking && !d.revoking && t.phase == phaseReleased {
				// The move was called off after the worker released:
				// it serves the task again.
				t.move(evCancelRevoke)
			}
			t.revoking = d.revoking
			return
		}
		fromTail := t.phase.tailing()
		t.move(evActivate)
		t.epoch, t.revoking = d.epoch, d.revoking
		a.startJobLocked(t, fromTail, func(ctx context.Context, prev *job) {
			a.activate(ctx, t, prev, d.epoch, d.handoffSeq, d.handoffAt)
		})
	default: // learner or standby
		if !t.stateful {
			return
		}
		ev := evLearn
		if d.role == api.RoleStandby {
			ev = evStandBy
		}
		if t.phase.tailing() && t.job != nil {
			t.move(ev)
			return
		}
		t.move(ev)
		t.revoking = false
		a.startJobLocked(t, false, func(ctx context.Context, prev *job) { a.tail(ctx, t, prev) })
	}
}

// dropLocked stops a task that left this member. Its local copy stays (it
// is reported in the member's positions). Callers hold a.mu.
func (a *Agent) dropLocked(t *task) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.phase == phaseGone {
		return
	}
	t.move(evDrop)
	t.revoking = false
	t.job.stop()
	if p := t.applied.Load(); p > 0 {
		a.positions[t.id] = p
	}
	a.metrics.learnerLag.DeleteLabelValues(t.id)
	a.metrics.restoreRate.DeleteLabelValues(t.id)
}

// viewChanged bumps the worker's view.
func (a *Agent) viewChanged() {
	a.mu.Lock()
	a.bumpViewLocked()
	a.mu.Unlock()
}

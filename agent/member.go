package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
)

// desired is what a generation wants of one task on this member.
type desired struct {
	role       string
	epoch      uint64
	revoke     *revokeOrder
	handoffSeq uint64
	handoffAt  time.Time
}

// runMember follows the generation record and applies this member's part
// of every new generation, and follows the group config ('handoff group
// set'). One watch (one consumer, one stream of idle heartbeats) serves
// both, and this member's assignment: a compact generation record holds
// nothing of the other members, so that what a member receives per
// generation does not grow with the group, and an assignment written for
// it comes to it without a read.
func (a *Agent) runMember(ctx context.Context) error {
	var w memberWatch
	own := group.PrefixAssignment + a.opts.MemberID
	group.Watch{
		KV:      a.kv,
		Keys:    []string{group.KeyGeneration, group.KeyConfig, own},
		Rewatch: a.rewatchSignal,
		Log:     a.log,
		Reset:   func() { w = memberWatch{} },
		Update: func(e jetstream.KeyValueEntry) error {
			if e.Operation() != jetstream.KeyValuePut {
				return nil
			}
			switch e.Key() {
			case group.KeyConfig:
				a.applyConfig(e)
				return nil
			case own:
				var ma group.MemberAssignment
				if err := json.Unmarshal(e.Value(), &ma); err != nil {
					a.log.Error().Err(err).Uint64(fRevision, e.Revision()).Msg("ignoring undecodable assignment")
					return nil
				}
				w.pushed = &pushedAssignment{rev: e.Revision(), ma: ma}
				return nil
			}
			var g group.GenerationRecord
			if err := json.Unmarshal(e.Value(), &g); err != nil {
				a.log.Error().Err(err).Uint64(fRevision, e.Revision()).Msg("ignoring undecodable generation record")
				return nil
			}
			if err := a.applyGeneration(ctx, g, &w); err != nil {
				return fmt.Errorf("apply generation %d: %w", g.Generation, err)
			}
			return nil
		},
	}.Run(ctx)
	return nil
}

// memberWatch is what the member loop's watch has delivered that a
// generation record may need: fresh with every watch.
type memberWatch struct {
	// applied is the last generation this watch delivered and the member
	// applied (0: none yet). The watch delivers every generation record
	// in order, so the next one's number follows it unless a record was
	// missed (a fresh watch starts at the last one).
	applied uint64
	// pushed is the last of this member's assignments delivered since.
	pushed *pushedAssignment
}

// pushedAssignment is one of this member's assignments, as the watch
// delivered it.
type pushedAssignment struct {
	rev uint64
	ma  group.MemberAssignment
}

// ownAssignment is this member's part of generation g: its revision (0
// when g does not include it) and its content. A full record names its
// revision. For a compact one that follows the last generation the watch
// delivered, an assignment delivered since that was written for g by g's
// leadership is the change; without one, nothing changed for this member
// (a leader writes the assignment of every member whose part changed, and
// of every member it removes, before the generation record). A compact
// record after a gap sends the member to the full record (group.ReadIndex).
// It reads the assignment only when the watch did not deliver it.
func (a *Agent) ownAssignment(ctx context.Context, g group.GenerationRecord, w *memberWatch, prevRev uint64, prev group.MemberAssignment) (uint64, group.MemberAssignment, error) {
	none := group.MemberAssignment{Member: a.opts.MemberID}
	if g.Compact && w.applied != 0 && g.Generation == w.applied+1 {
		p := w.pushed
		switch {
		case p == nil || p.ma.Generation != g.Generation || p.ma.Term != g.Term:
			return prevRev, prev, nil // unchanged (an assignment of another leadership was never published)
		case p.ma.Removed:
			return 0, none, nil
		}
		return p.rev, p.ma, nil
	}
	if g.Compact {
		full, err := group.ReadIndex(ctx, a.kv, g)
		if err != nil {
			return 0, none, err
		}
		g = full
	}
	rev, ok := g.Assignments[a.opts.MemberID]
	switch {
	case !ok:
		return 0, none, nil
	case rev == prevRev:
		return rev, prev, nil
	case w.pushed != nil && w.pushed.rev == rev:
		return rev, w.pushed.ma, nil
	}
	_, ma, err := group.ReadMemberAssignment(ctx, a.kv, a.opts.MemberID, rev)
	return rev, ma, err
}

// applyGeneration reads this member's assignment in g and reconciles the
// task runtimes with it; w is what its watch delivered before g.
func (a *Agent) applyGeneration(ctx context.Context, g group.GenerationRecord, w *memberWatch) error {
	seen := time.Now()
	a.mu.Lock()
	if g.Generation <= a.generation && a.included {
		if g.Generation == a.generation {
			w.applied = g.Generation // this member's state is g's
		}
		a.mu.Unlock()
		return nil
	}
	prevRev := a.assignedRev
	prevAssigned := a.assigned
	a.mu.Unlock()

	rev, mine, err := a.ownAssignment(ctx, g, w, prevRev, prevAssigned)
	if err != nil {
		return err
	}
	w.applied, w.pushed = g.Generation, nil
	included := rev != 0
	var read time.Duration // reading this member's assignment, when it changed
	if rev != prevRev {
		read = time.Since(seen)
	}

	want := map[string]desired{}
	for id, t := range mine.Tasks {
		d := desired{role: api.RoleActive, epoch: t.Epoch, handoffSeq: t.HandoffSeq, handoffAt: t.HandoffAt}
		if rv := t.Revoke; rv != nil {
			d.revoke = &revokeOrder{target: rv.Target, epoch: rv.Epoch}
		}
		want[id] = d
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
	if mine.Shutdown && a.leavingSince == nil {
		// A shutdown answers a leave, and this run of the member asked
		// for none: the generation is from before it started (its
		// previous run left under the same ID, and no leader has planned
		// since). The next plan counts it a member again.
		mine.Shutdown = false
	}
	a.generation = g.Generation
	if c := g.IsCandidate(a.opts.MemberID); a.candidate.Swap(c) != c {
		a.candidacy.fire()
	}
	a.assigned = mine
	a.assignedRev = rev
	if included {
		a.included = true
	}
	before := a.handoverRecordsLocked()
	for id, t := range a.tasks {
		d, ok := want[id]
		t.mu.Lock()
		switch {
		case t.unrecorded(d, ok):
			// Taken over directly at an epoch this generation does not
			// know yet: the changelog says it is this member's.
		case !ok && t.phase != phaseGone:
			a.apply(t, change{ev: evDrop})
		}
		t.mu.Unlock()
	}
	for id, d := range want {
		a.reconcileLocked(id, d, g.Generation)
	}
	a.expectIncomingLocked(g.Incoming[a.opts.MemberID])
	a.metrics.generation.Set(float64(g.Generation))
	a.bumpViewLocked()
	if !maps.Equal(before, a.handoverRecordsLocked()) {
		// The leader waits for what the record says of releases and
		// takeovers; the rest of it (the generation applied, positions)
		// can wait for the next heartbeat.
		a.kickHeartbeat()
	}
	return nil
}

// expectIncomingLocked tells incoming which of ids, the tasks a generation
// says are being handed over to this member directly, are still to come:
// those it tails. Callers hold a.mu.
func (a *Agent) expectIncomingLocked(ids []string) {
	var coming []string
	for _, id := range ids {
		t, ok := a.tasks[id]
		if !ok {
			continue
		}
		t.mu.Lock()
		tailing := t.phase.tailing()
		t.mu.Unlock()
		if tailing {
			coming = append(coming, id)
		}
	}
	a.incoming.expect(coming)
}

// handoverRecord is what the member record says of one task's hand-off.
type handoverRecord struct {
	release  assign.Release
	takeover assign.Takeover
}

// handoverRecordsLocked returns what the member record says of the tasks'
// releases and takeovers. Callers hold a.mu.
func (a *Agent) handoverRecordsLocked() map[string]handoverRecord {
	out := map[string]handoverRecord{}
	for id, t := range a.tasks {
		t.mu.Lock()
		var h handoverRecord
		if t.release != nil {
			h.release = *t.release
		}
		if t.takeover != nil {
			h.takeover = *t.takeover
		}
		t.mu.Unlock()
		if h != (handoverRecord{}) {
			out[id] = h
		}
	}
	return out
}

// unrecorded reports whether t was taken over directly at an epoch that a
// generation wanting d of it (ok false: nothing) has not recorded: it still
// shows the hand-off's start, and must not undo it. A generation that shows
// the task here at the takeover's epoch records it; one that shows it at a
// later epoch, or elsewhere once recorded, is the group's word again.
// Callers hold t.mu.
func (t *task) unrecorded(d desired, ok bool) bool {
	if t.takeover == nil || t.phase != phaseActive {
		return false
	}
	if ok && d.role == api.RoleActive && d.epoch >= t.takeover.Epoch {
		return false
	}
	return true
}

// reconcileLocked moves one task's runtime to what generation gen wants of
// it, and keeps its release while gen still waits for it (keepLocked).
// Callers hold a.mu.
func (a *Agent) reconcileLocked(id string, d desired, gen uint64) {
	t := a.taskLocked(id)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.unrecorded(d, true) {
		return
	}
	switch d.role {
	case api.RoleActive:
		if t.phase.owned() && t.phase != phaseLost && t.epoch == d.epoch {
			if t.revoke != nil && d.revoke == nil && t.phase == phaseReleased && t.release != nil && t.release.To == "" && !t.forWorker {
				// The move was called off after a release through the
				// leader: the worker serves the task again. A direct
				// release is final.
				a.apply(t, change{ev: evCancelRevoke})
			}
			a.keepLocked(t, d, gen)
			return
		}
		a.apply(t, change{ev: evActivate, epoch: d.epoch, revoke: d.revoke, handoffSeq: d.handoffSeq, handoffAt: d.handoffAt})
	default: // learner or standby
		if !t.stateful {
			return
		}
		ev := evLearn
		if d.role == api.RoleStandby {
			ev = evStandBy
		}
		a.apply(t, change{ev: ev})
	}
}

// keepLocked applies a generation gen that keeps t here at its epoch and
// wants d of it: it records a takeover, carries the generation's revoke,
// and keeps the release gen still waits for (keptRelease). Callers hold a.mu
// and t.mu.
func (a *Agent) keepLocked(t *task, d desired, gen uint64) {
	rel, forWorker := t.keptRelease(d, gen)
	a.apply(t, change{ev: evKeep, revoke: d.revoke, release: rel, forWorker: forWorker})
}

// keptRelease is t's release, and whether its agent made it for its lost
// worker, as a generation gen that wants d of t still waits for it. A
// direct release (its release entry named the successor), or one made for
// a lost worker, stands while the task is still this member's at the
// release's epoch; one through the leader while the task is still revoked.
// A release through the leader still in force (the worker has not served
// the task since) answers gen's revoke too, even one issued again after a
// cancel this member never saw, so it is stamped with gen. Callers hold
// t.mu.
func (t *task) keptRelease(d desired, gen uint64) (*assign.Release, bool) {
	r := t.release
	switch {
	case r == nil:
		return nil, t.forWorker
	case r.To != "":
		if d.epoch != r.Epoch {
			return nil, t.forWorker
		}
		return r, t.forWorker
	case t.forWorker:
		if d.epoch != r.Epoch {
			return nil, false
		}
	case d.revoke == nil:
		return nil, t.forWorker
	}
	if t.phase == phaseReleased && t.epoch == r.Epoch {
		rr := *r
		rr.Generation = gen
		return &rr, t.forWorker
	}
	return r, t.forWorker
}

// taskLocked returns the runtime of task id, made (gone, with the position
// of its local copy) if this member had none. Callers hold a.mu.
func (a *Agent) taskLocked(id string) *task {
	t, ok := a.tasks[id]
	if !ok {
		stateful, _ := a.taskKind(id)
		t = &task{id: id, stateful: stateful}
		a.tasks[id] = t
		if a.queries != nil {
			a.queries.hold(t) // its copy answers queries from now on
		}
	}
	return t
}

// viewChanged bumps the worker's view.
func (a *Agent) viewChanged() {
	a.mu.Lock()
	a.bumpViewLocked()
	a.mu.Unlock()
}

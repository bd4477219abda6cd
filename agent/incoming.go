package agent

import (
	"sync"
	"time"

	"github.com/handoffhq/handoff/restore"
)

// incomingHold bounds how long one hand-off to this member holds its
// catch-ups: the old owner's worker releases a task within its batch, but
// one that never does (it hung, or the revoke was withdrawn in a
// generation this member has not read) must not stop this member's
// restores for longer. A variable for the tests only.
var incomingHold = time.Second

// incoming is what this member knows of the tasks being handed over to it
// directly: a generation names them (group.GenerationRecord.Incoming) when
// it revokes them from their owners, before their release entries are
// appended. While one is in flight, the member's catch-ups (learners' and
// standbys' restores, in the learners' slots) yield: they take no further
// step, so that neither this member's cores nor the server's work on their
// bulk ahead of the release entry and its delivery to the task's tailer.
// In eager mode the hold starts earlier, when the task's learner here has
// caught up (expecting): the leader revokes it at once. The task's own
// catch-up, if it has not caught up (a reconnect), goes on
// (restore.Options.Urgent). A hold ends when the task is this member's
// (taken over, or ready after an activation), when it is lost or leaves
// this member, when a generation that named it no longer does, or after
// incomingHold. Its mutex is a leaf lock.
type incoming struct {
	limiter *restore.Limiter

	mu    sync.Mutex
	holds map[string]*hold
}

// hold is one task's hold of the limiter.
type hold struct {
	release func()
	timer   *time.Timer
	// named says that a generation named the task; a hold made before
	// (expecting) does not end when a generation does not name it yet.
	named bool
}

func newIncoming(l *restore.Limiter) *incoming {
	return &incoming{limiter: l, holds: map[string]*hold{}}
}

// expect makes ids the tasks being handed over to this member: the holds
// of new ones start, those of tasks no longer among them end.
func (in *incoming) expect(ids []string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
		in.startLocked(id).named = true
	}
	for id, h := range in.holds {
		if !want[id] && h.named {
			in.endLocked(id, h)
		}
	}
}

// expecting starts task id's hold before a generation names it: in eager
// mode a learner that has caught up is revoked at once, so its hand-off
// starts as soon as it has, and the generation that says so comes late to
// a member busy restoring.
func (in *incoming) expecting(id string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.startLocked(id)
}

// startLocked returns task id's hold, made if it has none.
func (in *incoming) startLocked(id string) *hold {
	if h, ok := in.holds[id]; ok {
		return h
	}
	h := &hold{release: in.limiter.Hold()}
	h.timer = time.AfterFunc(incomingHold, func() { in.end(id, h) })
	in.holds[id] = h
	return h
}

// done ends task id's hold, if it has one: it was taken over, or left.
func (in *incoming) done(id string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if h, ok := in.holds[id]; ok {
		in.endLocked(id, h)
	}
}

// end ends h, if it is still task id's hold.
func (in *incoming) end(id string, h *hold) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.holds[id] == h {
		in.endLocked(id, h)
	}
}

func (in *incoming) endLocked(id string, h *hold) {
	h.timer.Stop()
	h.release()
	delete(in.holds, id)
}

// has reports whether task id is being handed over to this member.
func (in *incoming) has(id string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	_, ok := in.holds[id]
	return ok
}

// clear ends every hold: the agent is stopping.
func (in *incoming) clear() {
	in.mu.Lock()
	defer in.mu.Unlock()
	for id, h := range in.holds {
		in.endLocked(id, h)
	}
}

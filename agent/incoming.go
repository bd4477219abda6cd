package agent

import (
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/restore"
)

// incomingHold bounds how long one hand-off to this member holds its
// catch-ups: the old owner's worker releases a task within its batch, but
// one that never does (it hung, or the revoke was withdrawn in a
// generation this member has not read) must not stop this member's
// restores for longer. A variable for the tests only.
var incomingHold = time.Second

// firstCommitHold bounds how long a hold goes on once the task is this
// member's, waiting for the new owner's first commit: the events that
// waited for the hand-off come out with it, and a worker with no input
// must not hold the restores.
const firstCommitHold = 100 * time.Millisecond

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
// (restore.Options.Urgent). A hold ends with the new owner's first commit
// (at most firstCommitHold after the task became this member's), when the
// task is lost or leaves this member, when a generation that named it no
// longer does before it is this member's, or after incomingHold. Its mutex
// is a leaf lock. A nil incoming holds nothing.
type incoming struct {
	limiter *restore.Limiter
	log     zerolog.Logger

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
	// owned says that the task is this member's: the hold waits for its
	// first commit, whatever the generations say.
	owned bool
	since time.Time
}

func newIncoming(l *restore.Limiter, log zerolog.Logger) *incoming {
	return &incoming{limiter: l, log: log, holds: map[string]*hold{}}
}

// expect makes ids the tasks being handed over to this member: the holds
// of new ones start, those of tasks no longer among them end.
func (in *incoming) expect(ids []string) {
	if in == nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
		in.startLocked(id).named = true
	}
	for id, h := range in.holds {
		if !want[id] && h.named && !h.owned {
			in.endLocked(id, h)
		}
	}
}

// expecting starts task id's hold before a generation names it: in eager
// mode a learner that has caught up is revoked at once, so its hand-off
// starts as soon as it has, and the generation that says so comes late to
// a member busy restoring.
func (in *incoming) expecting(id string) {
	if in == nil {
		return
	}
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
	h.since = time.Now()
	h.timer = time.AfterFunc(incomingHold, func() { in.expired(id, h) })
	in.holds[id] = h
	return h
}

// owned keeps task id's hold, if it has one, until the new owner's first
// commit (done), for at most firstCommitHold: the task is this member's.
func (in *incoming) owned(id string) {
	if in == nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if h, ok := in.holds[id]; ok {
		h.owned = true
		h.timer.Reset(firstCommitHold)
	}
}

// done ends task id's hold, if it has one: its new owner committed, or it
// left or was lost.
func (in *incoming) done(id string) {
	if in == nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if h, ok := in.holds[id]; ok {
		in.endLocked(id, h)
	}
}

// expired ends h, if it is still task id's hold: its bound has passed.
func (in *incoming) expired(id string, h *hold) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.holds[id] != h {
		return
	}
	in.endLocked(id, h)
	if !h.owned {
		in.log.Info().Str(fTask, id).Dur("held", time.Since(h.since)).
			Msg("a task being handed over to this member did not come: its catch-ups go on")
	}
}

func (in *incoming) endLocked(id string, h *hold) {
	h.timer.Stop()
	h.release()
	delete(in.holds, id)
	in.log.Debug().Str(fTask, id).Dur("held", time.Since(h.since)).Bool("owned", h.owned).Msg("catch-ups no longer held for a hand-off")
}

// has reports whether task id is being handed over to this member.
func (in *incoming) has(id string) bool {
	if in == nil {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	_, ok := in.holds[id]
	return ok
}

// clear ends every hold: the agent is stopping.
func (in *incoming) clear() {
	if in == nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for id, h := range in.holds {
		in.endLocked(id, h)
	}
}

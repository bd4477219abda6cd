package conformance

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/handoffhq/handoff/api"
)

// The cases, in the order the report lists them. Their IDs are stable:
// scripts may match them.
const (
	CaseStart          = "start-from-checkpoint"
	CaseRevokedRunning = "release-revoked"
	CaseRevokedIdle    = "release-never-started"
	CaseNotOwner       = "stop-on-not-owner"
	CaseResume         = "restart-on-resume"
	CaseRetry          = "retry-on-503"
	CaseTimeout        = "timeout-unanswered"
	CasePolling        = "poll-at-once"
	CaseEpoch          = "send-epoch"
	CaseShutdown       = "exit-on-shutdown"
)

// caseTitles says what each case checks: title with the counting job,
// own with a job of the worker's own where that checks less (the parts that
// need the known job are left out), and skip, for a case that is all about
// the known job, why a run of JobOwn skips it.
var caseTitles = []struct{ id, title, own, skip string }{
	{id: CaseStart, title: "starts each active task from its checkpoint; every commit is exact",
		skip: "needs the counting job: only the counts of input the run published show that each task resumed from its checkpoint and applied no input twice; a worker of another job checks that itself"},
	{id: CaseRevokedRunning, title: "makes a final commit and releases a revoked running task; no commit after the release",
		own: "releases a revoked running task in time; no commit after the release"},
	{id: CaseRevokedIdle, title: "releases a revoked task it never started"},
	{id: CaseNotOwner, title: "after 409 not_owner, stops the task without releasing it"},
	{id: CaseResume, title: "after 409 resume, restarts from the view's checkpoint and never retries the commit",
		own: "after 409 resume, reads /assignment before its next commit and never retries the commit"},
	{id: CaseRetry, title: "retries after 503 unavailable (a commit and a poll)"},
	{id: CaseTimeout, title: "gives up a call the agent never answers (a paused agent) and retries it"},
	{id: CasePolling, title: "long-polls /assignment, re-polls at once, never sleeps between polls"},
	{id: CaseEpoch, title: "sends the task's epoch with every commit and release"},
	{id: CaseShutdown, title: "exits with status 0 on shutdown"},
}

// Limits of the cases.
const (
	pollGapAfterAnswer = 1500 * time.Millisecond // a poll must follow an answer within this (the agent's grace is 2 s)
	pollGapAfterError  = 5 * time.Second         // ... or an error answer (Retry-After: 1)
	maxUnchangedQuick  = 10                      // polls without wait that got an unchanged view
	shutdownExitWait   = 10 * time.Second
	maxCallTimeout     = 15 * time.Second // docs/api.md suggests 10 s
)

// verdicts collects the first failure of each case.
type verdicts map[string]string

func (v verdicts) fail(id, format string, args ...any) {
	if _, failed := v[id]; !failed {
		v[id] = fmt.Sprintf(format, args...)
	}
}

// shown is a task as a view showed it to the worker: first delivered at.
type shown struct {
	task  string
	epoch uint64
	at    time.Time
}

// history is the recorded calls, sorted out for the cases.
type history struct {
	calls    []call
	commits  []call
	releases []call
	polls    []call
	views    []call  // answered polls with a view, in the order they were answered
	actives  []shown // (task, epoch) shown active and not revoked, first time
	revokes  []shown // (task, epoch) shown in revoke, first time
	shutdown time.Time
}

func newHistory(calls []call) *history {
	h := &history{calls: calls}
	seenA, seenR := map[string]bool{}, map[string]bool{}
	for _, c := range calls {
		switch c.Kind {
		case callCommit:
			h.commits = append(h.commits, c)
		case callRelease:
			h.releases = append(h.releases, c)
		case callAssignment:
			h.polls = append(h.polls, c)
			if c.View != nil {
				h.views = append(h.views, c)
			}
		}
	}
	sort.SliceStable(h.views, func(i, j int) bool { return h.views[i].End.Before(h.views[j].End) })
	for _, c := range h.views {
		v := c.View
		for _, tv := range v.Tasks {
			key := fmt.Sprintf("%s@%d", tv.ID, tv.Epoch)
			revoked := slices.Contains(v.Revoke, tv.ID)
			if revoked && !seenR[key] {
				seenR[key] = true
				h.revokes = append(h.revokes, shown{tv.ID, tv.Epoch, c.End})
			}
			if !revoked && tv.Role == api.RoleActive && !seenA[key] {
				seenA[key] = true
				h.actives = append(h.actives, shown{tv.ID, tv.Epoch, c.End})
			}
		}
		if v.Shutdown && h.shutdown.IsZero() {
			h.shutdown = c.End
		}
	}
	return h
}

// wasActive reports whether the worker was shown task active at epoch
// before t.
func (h *history) wasActive(task string, epoch uint64, t time.Time) bool {
	for _, s := range h.actives {
		if s.task == task && s.epoch == epoch && s.at.Before(t) {
			return true
		}
	}
	return false
}

// revokedAt returns when the worker was first shown task in revoke at
// epoch (zero if never).
func (h *history) revokedAt(task string, epoch uint64) time.Time {
	for _, s := range h.revokes {
		if s.task == task && s.epoch == epoch {
			return s.at
		}
	}
	return time.Time{}
}

// nextRevoke returns the first revoke of task shown after t (zero if none).
func (h *history) nextRevoke(task string, t time.Time) time.Time {
	for _, s := range h.revokes {
		if s.task == task && s.at.After(t) {
			return s.at
		}
	}
	return time.Time{}
}

// committing reports whether a commit of task was in flight at t, or was
// answered less than gap before t.
func (h *history) committing(task string, t time.Time, gap time.Duration) bool {
	return slices.ContainsFunc(h.commits, func(c call) bool {
		return c.Task == task && c.Start.Before(t) && (c.End.IsZero() || c.End.After(t.Add(-gap)))
	})
}

// nextActive returns when task was next shown active at a new epoch after t.
func (h *history) nextActive(task string, t time.Time) time.Time {
	for _, s := range h.actives {
		if s.task == task && s.at.After(t) {
			return s.at
		}
	}
	return time.Time{}
}

// checkpointSeq decodes the conformance job's checkpoint.
func checkpointSeq(cp []byte) (uint64, bool) {
	if len(cp) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(cp), true
}

func clock(t time.Time) string { return t.Format("15:04:05.000") }

// judge decides every case from the run's record. With JobOwn, the
// checks that need the known job are not made.
func (r *run) judge(calls []call) verdicts {
	h := newHistory(calls)
	v := verdicts{}
	if r.o.Job == JobOwn {
		judgeToken(h, v, CaseEpoch)
	} else {
		judgeToken(h, v, CaseStart)
		r.judgeStart(h, v)
	}
	r.judgeRevoked(h, v)
	r.judgeFaults(h, v)
	r.judgePolling(h, v)
	r.judgeEpochs(h, v)
	r.judgeShutdown(h, v)
	return v
}

// judgeToken fails case id for a worker that made no commit because its
// calls were refused for want of the token.
func judgeToken(h *history, v verdicts, id string) {
	unauthorized := 0
	for _, c := range h.calls {
		if c.Status == 401 {
			unauthorized++
		}
	}
	if len(h.commits) == 0 && unauthorized > 0 {
		v.fail(id, "%d calls were refused with 401 unauthorized: send \"Authorization: Bearer $%s\" on every call", unauthorized, EnvSidecarToken)
	}
}

func (r *run) judgeStart(h *history, v verdicts) {
	resumeCall := r.faults["resume"]
	var afterResume *call // the first commit after the resume fault
	if resumeCall != nil {
		for i, c := range h.commits {
			if c.Task == resumeCall.Task && c.Start.After(resumeCall.End) && !bytes.Equal(c.Body, resumeCall.Body) {
				afterResume = &h.commits[i]
				break
			}
		}
	}
	for _, c := range h.commits {
		landed := c.Status == 200 || c.Fault == faultResume
		if !landed || c.Commit == nil {
			continue
		}
		id := CaseStart
		if afterResume != nil && c.Start.Equal(afterResume.Start) && c.Task == afterResume.Task {
			id = CaseResume
		}
		seq, ok := checkpointSeq(c.Commit.Checkpoint)
		if !ok {
			v.fail(id, "commit of %s at %s has a %d-byte checkpoint; the counting job's checkpoint is the 8-byte big-endian input sequence of the last message counted",
				c.Task, clock(c.Start), len(c.Commit.Checkpoint))
			continue
		}
		puts := map[string]string{}
		for _, kv := range c.Commit.Puts {
			puts[string(kv.Key)] = string(kv.Value)
		}
		if msg := (counts{r.prod.input(c.Task)}).checkPuts(seq, puts); msg != "" {
			why := "it did not resume from the checkpoint the view gave it, or counted some input twice"
			if id == CaseResume {
				why = "after 409 resume it did not restart from the view's checkpoint, which includes the refused commit"
			}
			v.fail(id, "commit of %s at epoch %d (%s): %s: %s", c.Task, c.Commit.Epoch, clock(c.Start), msg, why)
		}
	}
	if len(h.actives) == 0 {
		v.fail(CaseStart, "not exercised: the worker was never shown an active task (it did not poll GET /assignment)")
	}
	// Every activation gets work, unless it ended quickly.
	for _, s := range h.actives {
		end := h.nextRevoke(s.task, s.at)
		if !end.IsZero() && end.Sub(s.at) < 2*time.Second {
			continue
		}
		if !h.shutdown.IsZero() && h.shutdown.Sub(s.at) < 2*time.Second {
			continue
		}
		committed := slices.ContainsFunc(h.commits, func(c call) bool {
			return c.Task == s.task && c.Start.After(s.at) && (end.IsZero() || c.Start.Before(end.Add(r.o.ReleaseWait)))
		})
		if !committed {
			v.fail(CaseStart, "task %s was shown active at epoch %d at %s, with input arriving, but the worker never committed on it", s.task, s.epoch, clock(s.at))
		}
	}
}

func (r *run) judgeRevoked(h *history, v verdicts) {
	hiddenTask, hiddenEpoch := r.px.hidden()
	notOwner := r.faults["not_owner"]
	// A worker that reads no input while a commit is in flight (the
	// example workers: they commit in the loop that reads) has nothing
	// read and uncommitted when a revoke reaches it during a commit, or
	// just after one, before the next input message can have come and been
	// read: it rightly releases without a final commit, and that revoke
	// says nothing about its final commits. The longer commits take (a
	// loaded agent), the more revokes come during one: under load, every
	// revoke of a run may.
	busyGap := 2 * r.o.InputEvery
	running, final, busy := 0, 0, 0
	for _, rv := range h.revokes {
		idle := rv.task == hiddenTask && rv.epoch == hiddenEpoch
		if !idle && !h.wasActive(rv.task, rv.epoch, rv.at) {
			continue // never shown to the worker as its own
		}
		if notOwner != nil && notOwner.Task == rv.task && notOwner.Commit != nil && notOwner.Commit.Epoch == rv.epoch {
			continue // judged by stop-on-not-owner
		}
		id := CaseRevokedRunning
		if idle {
			id = CaseRevokedIdle
		}
		i := slices.IndexFunc(h.releases, func(c call) bool { return c.Task == rv.task && c.Start.After(rv.at) })
		if i < 0 {
			v.fail(id, "task %s was revoked at epoch %d at %s and never released: the agent moved it only after its %v release timeout, and a real group's task would have paused that long",
				rv.task, rv.epoch, clock(rv.at), releaseTimeout)
			continue
		}
		rel := h.releases[i]
		if d := rel.Start.Sub(rv.at); d > r.o.ReleaseWait {
			v.fail(id, "task %s was released %v after its revoke reached the worker (at most %v): the task pauses until it is released", rv.task, d.Round(time.Millisecond), r.o.ReleaseWait)
		}
		again := h.nextActive(rv.task, rel.Start)
		for _, c := range h.commits {
			if c.Task == rv.task && c.Start.After(rel.Start) && (again.IsZero() || c.Start.Before(again)) {
				v.fail(id, "task %s was committed at %s, after its release at %s: a released task's commits are refused; stop committing before releasing", rv.task, clock(c.Start), clock(rel.Start))
				break
			}
		}
		if idle {
			for _, c := range h.commits {
				if c.Task == rv.task && c.Commit != nil && c.Commit.Epoch == rv.epoch && c.Start.Before(rel.Start) {
					v.fail(id, "task %s was committed at epoch %d, which the worker was never shown active", rv.task, rv.epoch)
					break
				}
			}
			continue
		}
		running++
		switch {
		case slices.ContainsFunc(h.commits, func(c call) bool {
			return c.Task == rv.task && c.Start.After(rv.at) && c.Start.Before(rel.Start) && c.Status == 200
		}):
			final++
		case h.committing(rv.task, rv.at, busyGap):
			busy++
		}
	}
	switch {
	case running == 0:
		v.fail(CaseRevokedRunning, "not exercised: no task the worker was running was revoked and released (see the run's notes)")
	case final == 0 && running > busy && r.o.Job == JobCount:
		// Input arrives all the time, so a worker that commits what it has
		// read on a revoke makes some final commits; one task may have had
		// nothing pending, not every one. If every revoke came during a
		// commit, there is nothing to judge.
		others := ""
		if busy > 0 {
			others = fmt.Sprintf(" (besides %d whose revoke came during or just after a commit, which may have left nothing to commit)", busy)
		}
		v.fail(CaseRevokedRunning, "none of the %d revoked tasks got a commit between its revoke and its release%s: on a revoke, stop consuming, commit what was read, then release", running-busy, others)
	}
	if hiddenTask == "" {
		v.fail(CaseRevokedIdle, "not exercised: no task came back to the worker's member to be hidden (see the run's notes)")
	} else if h.revokedAt(hiddenTask, hiddenEpoch).IsZero() {
		v.fail(CaseRevokedIdle, "not exercised: task %s (hidden at epoch %d) was never revoked (see the run's notes)", hiddenTask, hiddenEpoch)
	}
}

func (r *run) judgeFaults(h *history, v verdicts) {
	if f := r.faults["not_owner"]; f == nil || f.Commit == nil {
		v.fail(CaseNotOwner, "not exercised: the worker made no commit of %s to refuse (see the run's notes)", r.tasks[2])
	} else {
		epoch := f.Commit.Epoch
		revoked := h.revokedAt(f.Task, epoch)
		again := h.nextActive(f.Task, f.End)
		for _, c := range h.commits {
			if c.Task == f.Task && c.Start.After(f.End) && (again.IsZero() || c.Start.Before(again)) {
				v.fail(CaseNotOwner, "task %s was committed again at %s after 409 not_owner at %s: stop the task; another member owns it", f.Task, clock(c.Start), clock(f.End))
				break
			}
		}
		for _, c := range h.releases {
			if c.Task == f.Task && c.Start.After(f.End) && (revoked.IsZero() || c.Start.Before(revoked)) {
				v.fail(CaseNotOwner, "task %s was released at %s after 409 not_owner at %s: a worker that is not the owner has nothing to release", f.Task, clock(c.Start), clock(f.End))
				break
			}
		}
	}

	if f := r.faults["resume"]; f == nil {
		v.fail(CaseResume, "not exercised: the worker made no commit of %s to refuse (see the run's notes)", r.tasks[1])
	} else {
		for _, c := range h.commits {
			if c.Task == f.Task && c.Start.After(f.End) && bytes.Equal(c.Body, f.Body) {
				v.fail(CaseResume, "the commit of %s refused with 409 resume at %s was sent again at %s: the agent had applied it, so a retry applies the work twice", f.Task, clock(f.End), clock(c.Start))
				break
			}
		}
		i := slices.IndexFunc(h.commits, func(c call) bool {
			return c.Task == f.Task && c.Start.After(f.End) && !bytes.Equal(c.Body, f.Body)
		})
		moved := h.nextRevoke(f.Task, f.End)
		switch {
		case i < 0 && (moved.IsZero() || moved.Sub(f.End) > r.o.PhaseWait):
			v.fail(CaseResume, "task %s was never committed again after 409 resume at %s: restart it from the view's checkpoint", f.Task, clock(f.End))
		case i >= 0:
			next := h.commits[i]
			read := slices.ContainsFunc(h.polls, func(c call) bool {
				return c.Start.After(f.End) && !c.End.IsZero() && c.End.Before(next.Start) && c.Status == 200
			})
			if !read {
				v.fail(CaseResume, "after 409 resume at %s, task %s was committed again at %s without reading /assignment first: the view's checkpoint includes the refused commit", clock(f.End), f.Task, clock(next.Start))
			}
		}
	}

	if f := r.faults["unavailable-commit"]; f == nil {
		v.fail(CaseRetry, "not exercised: the worker made no commit of %s to answer with 503", r.tasks[0])
	} else {
		moved := h.nextRevoke(f.Task, f.End)
		ok := slices.ContainsFunc(h.commits, func(c call) bool { return c.Task == f.Task && c.Start.After(f.End) && c.Status == 200 })
		if !ok && (moved.IsZero() || moved.Sub(f.End) > r.o.PhaseWait) {
			v.fail(CaseRetry, "task %s was never committed again after a 503 at %s: retry (a commit refused with 503 may or may not have landed; a retry that would apply it twice is refused with 409 resume)", f.Task, clock(f.End))
		}
	}
	if f := r.faults["hang"]; f == nil {
		v.fail(CaseTimeout, "not exercised: the worker made no commit of %s to leave unanswered", r.tasks[3])
	} else {
		waited := f.End.Sub(f.Start)
		switch {
		case !f.Abandoned:
			v.fail(CaseTimeout, "the worker waited %v for a commit of %s that the agent never answered, until the run answered it: give every call a timeout (at most %v; a paused agent accepts connections and never answers)",
				waited.Round(time.Millisecond), f.Task, maxCallTimeout)
		case waited > maxCallTimeout:
			v.fail(CaseTimeout, "the worker gave up a commit the agent never answered after %v: time calls out sooner (at most %v)", waited.Round(time.Millisecond), maxCallTimeout)
		case !slices.ContainsFunc(h.commits, func(c call) bool { return c.Task == f.Task && c.Start.After(f.End) && c.Status == 200 }):
			v.fail(CaseTimeout, "task %s was never committed again after its commit went unanswered at %s: retry it, or restart the task from /assignment", f.Task, clock(f.Start))
		}
	}
	if f := r.faults["unavailable-poll"]; f == nil {
		v.fail(CaseRetry, "not exercised: no poll to answer with 503")
	} else if !slices.ContainsFunc(h.polls, func(c call) bool { return c.Start.After(f.End) && c.Start.Sub(f.End) <= pollGapAfterError }) {
		v.fail(CaseRetry, "no poll of /assignment within %v after a 503 at %s: retry shortly (the answer has Retry-After: 1)", pollGapAfterError, clock(f.End))
	}
}

func (r *run) judgePolling(h *history, v verdicts) {
	if len(h.polls) == 0 {
		v.fail(CasePolling, "the worker never polled GET /assignment")
		return
	}
	end := time.Now()
	if !r.worker.exited.IsZero() {
		end = r.worker.exited
	}
	if !h.shutdown.IsZero() && h.shutdown.Before(end) {
		end = h.shutdown
	}
	// Sweep the polls in start order: the worker must always have one open.
	covered := h.polls[0].Start
	lastOK := true
	for _, c := range h.polls {
		if c.Start.After(end) {
			break
		}
		limit := pollGapAfterAnswer
		if !lastOK {
			limit = pollGapAfterError
		}
		if gap := c.Start.Sub(covered); gap > limit {
			v.fail(CasePolling, "no GET /assignment was open for %v after the answer at %s: poll again at once with after=<version>, and never sleep between polls (a change waits for the next poll)",
				gap.Round(time.Millisecond), clock(covered))
		}
		cEnd := c.End
		if cEnd.IsZero() {
			cEnd = end
		}
		if cEnd.After(covered) {
			covered, lastOK = cEnd, c.Status == 200
		}
	}
	if gap := end.Sub(covered); gap > pollGapAfterError {
		v.fail(CasePolling, "no GET /assignment was open for the last %v of the run (from %s)", gap.Round(time.Millisecond), clock(covered))
	}
	unchanged := 0
	var last uint64
	for _, c := range h.views {
		if c.Query.Get("wait") == "" && c.View.Version == last {
			unchanged++
		}
		last = c.View.Version
	}
	if unchanged > maxUnchangedQuick {
		v.fail(CasePolling, "%d polls without ?wait= got an unchanged view: long-poll with ?wait=30s&after=<version> instead of polling in a loop", unchanged)
	}
}

func (r *run) judgeEpochs(h *history, v verdicts) {
	if len(h.commits) == 0 {
		v.fail(CaseEpoch, "not exercised: the worker made no commit (see the run's notes)")
	}
	for _, c := range h.commits {
		if c.Commit == nil {
			continue
		}
		switch {
		case c.Commit.Epoch == 0:
			v.fail(CaseEpoch, "commit of %s at %s has no epoch: send the task's epoch from /assignment, so that a commit of an older ownership is refused", c.Task, clock(c.Start))
		case !h.wasActive(c.Task, c.Commit.Epoch, c.Start):
			v.fail(CaseEpoch, "commit of %s at %s has epoch %d, which /assignment never showed it active at", c.Task, clock(c.Start), c.Commit.Epoch)
		}
	}
	for _, c := range h.releases {
		if c.releaseEpoch() == 0 {
			v.fail(CaseEpoch, "release of %s at %s has no ?epoch=: send the epoch of the ownership it stops, so that a late release never releases a later one", c.Task, clock(c.Start))
		}
	}
}

func (r *run) judgeShutdown(h *history, v verdicts) {
	w := r.worker
	switch {
	case h.shutdown.IsZero() && !w.exited.IsZero() && !r.killed:
		v.fail(CaseShutdown, "the worker %s at %s, before it was told to shut down", w.status(), clock(w.exited))
	case h.shutdown.IsZero():
		v.fail(CaseShutdown, "not exercised: the run never got to shutdown (see the run's notes)")
	case !w.exited.IsZero() && w.exited.Before(h.shutdown):
		v.fail(CaseShutdown, "the worker %s at %s, before it was told to shut down", w.status(), clock(w.exited))
	case r.killed || w.exited.Sub(h.shutdown) > shutdownExitWait:
		v.fail(CaseShutdown, "the worker was still running %v after /assignment said shutdown: true; exit then", shutdownExitWait)
	case w.err != nil:
		v.fail(CaseShutdown, "the worker %s after shutdown: exit with status 0", w.status())
	}
	if r.secondEnd != "" {
		v.fail(CaseShutdown, "the second member's worker (a copy of the command) %s: exit with status 0 on shutdown", r.secondEnd)
	}
}

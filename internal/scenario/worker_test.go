package scenario

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/record"
)

// workerLossOptions is a group whose agents declare a worker lost after 2 s
// and whose release timeout is far longer than any wait below: a task
// that moves in time moved because its agent released it for its lost
// worker, never because a timeout forced it (the agent heartbeats all
// along, so the session timeout never comes into it either).
func workerLossOptions() Options {
	o := DefaultOptions()
	o.WorkerTimeout = 2 * time.Second
	o.ReleaseTimeout = 2 * time.Minute
	return o
}

// lossDeadline bounds the wait for a lost worker's tasks to move: the
// worker timeout plus one hand-off, with room for a loaded machine, and
// well inside the release timeout of workerLossOptions.
func lossDeadline(o Options) time.Duration { return o.PollWait + o.WorkerTimeout + 45*time.Second }

// victimOf picks a member other than the leader that owns stateful tasks,
// and returns it with every task it owns.
func (h *Harness) victimOf(gv api.GroupView, ids ...string) (*Member, []string) {
	h.t.Helper()
	m := h.Member(pickNot(gv.Leader, ids...))
	stateful, stateless := Owned(gv, m.ID)
	if len(stateful) == 0 {
		h.t.Fatalf("%s owns no stateful task: %+v", m.ID, gv.Tasks)
	}
	return m, append(stateful, stateless...)
}

// loseWorker applies fault to victim's worker (its agent keeps running),
// waits until the tasks it owned have moved away and run on their new
// owners, checks that its record says lost, and waits until every task
// commits again. It returns when the fault happened.
func (h *Harness) loseWorker(o Options, victim *Member, owned []string, before map[string]uint64, fault string, do func() error) time.Time {
	h.t.Helper()
	at := time.Now()
	if err := do(); err != nil {
		h.t.Fatal(err)
	}
	h.Logf("%s the worker of %s, which owned %v; its agent keeps running", fault, victim.ID, owned)
	moved := h.WaitMovedAway(lossDeadline(o), victim.ID, owned, before)
	h.Logf("%v moved %s after that (worker timeout %s)", owned, time.Since(at).Round(time.Millisecond), o.WorkerTimeout)
	if s := WorkerState(moved, victim.ID); s != api.WorkerLost {
		h.t.Errorf("worker of %s after its tasks moved: %q, want %q", victim.ID, s, api.WorkerLost)
	}
	h.WaitCommitting(60*time.Second, 3)
	return at
}

// pausesTo returns the hand-off pauses of tasks moving to member.
func pausesTo(pauses []record.Pause, member string) []record.Pause {
	var out []record.Pause
	for _, p := range pauses {
		if p.To == member {
			out = append(out, p)
		}
	}
	return out
}

// logFirstCommits logs how long after t0 each moved task's new owner made
// its first acknowledged commit.
func (h *Harness) logFirstCommits(t0 time.Time, from string, tasks []string, before map[string]uint64) {
	first := h.FirstCommits(from, tasks, before)
	var ds []time.Duration
	for _, task := range tasks {
		if at, ok := first[task]; ok {
			ds = append(ds, at.Sub(t0))
		}
	}
	slices.Sort(ds)
	if len(ds) > 0 {
		h.Logf("first commit on the new owner after the fault: %d tasks, earliest %s, latest %s",
			len(ds), ds[0].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
}

// TestWorkerKilled kills -9 a member's worker while its agent keeps
// running. After the worker timeout the agent releases the worker's tasks
// at their last acknowledged commits and the group moves them to the other
// members, without waiting for the release timeout. The worker then
// starts again: it gets tasks back through learners, warm, since its agent
// kept its local copies. Counts stay exact.
func TestWorkerKilled(t *testing.T) {
	skipShort(t)
	o := workerLossOptions()
	h := New(t, o)
	ids := []string{"m1", "m2", "m3"}
	h.Start(3)
	gv := h.mustGroup()
	victim, owned := h.victimOf(gv, ids...)
	before := Epochs(gv)
	mark := h.Mark()

	killed := h.loseWorker(o, victim, owned, before, "killed (-9)", victim.KillWorker)
	h.logFirstCommits(killed, victim.ID, owned, before)

	back := h.Mark()
	h.StartWorker(victim)
	gv = h.WaitSettled(90*time.Second, ids...)
	if s := WorkerState(gv, victim.ID); s != api.WorkerAttached {
		t.Errorf("worker of %s after it started again: %q, want %q", victim.ID, s, api.WorkerAttached)
	}
	for _, a := range h.activationsAfter(back) {
		if a.Member == victim.ID && (!a.Planned || a.Replayed > 0) {
			t.Errorf("%s came back to %s at epoch %d with planned=%v, replayed %d: want a warm, planned move",
				a.Task, a.Member, a.Epoch, a.Planned, a.Replayed)
		}
	}
	h.WaitCommitting(60*time.Second, 3)
	h.Verify(Expect{Mark: mark})
}

// TestWorkerPaused freezes a member's worker (SIGSTOP) past the worker
// timeout while its agent keeps running: its open long-poll ends at its
// wait, the worker is declared lost, its agent releases its tasks and they
// move. Then the worker runs again (SIGCONT) with work in hand at its old
// epochs: none of its commits may be acknowledged after the release, and
// counts stay exact.
func TestWorkerPaused(t *testing.T) {
	skipShort(t)
	o := workerLossOptions()
	o.PollWait = time.Second
	h := New(t, o)
	ids := []string{"m1", "m2", "m3"}
	h.Start(3)
	gv := h.mustGroup()
	victim, owned := h.victimOf(gv, ids...)
	before := Epochs(gv)
	mark := h.Mark()

	h.loseWorker(o, victim, owned, before, "paused (SIGSTOP)", victim.PauseWorker)
	// What the worker would send on SIGCONT with work in hand at its old
	// epochs: its agent refuses it (and would it not, the counts below
	// would not be exact).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, task := range owned {
		if !slices.Contains(h.stateful, task) {
			continue
		}
		_, err := victim.Client().Commit(ctx, task, api.CommitRequest{Epoch: before[task],
			Puts: []api.KV{{Key: []byte("late"), Value: []byte("1")}}})
		if !errors.Is(err, api.ErrNotOwner) {
			t.Errorf("a late commit of %s at epoch %d through %s's agent = %v, want it refused as not_owner", task, before[task], victim.ID, err)
		}
	}

	if err := victim.ResumeWorker(); err != nil {
		t.Fatal(err)
	}
	h.Logf("resumed the worker of %s", victim.ID)
	gv = h.WaitSettled(90*time.Second, ids...)
	if s := WorkerState(gv, victim.ID); s != api.WorkerAttached {
		t.Errorf("worker of %s after SIGCONT: %q, want %q", victim.ID, s, api.WorkerAttached)
	}
	h.WaitCommitting(60*time.Second, 3)
	rep := h.Verify(Expect{Mark: mark})

	// Whatever the worker tried at its old epochs after its agent released
	// them, nothing was acknowledged past the new owner's epoch marker.
	refused := 0
	for _, e := range rep.Events {
		if e.Member == victim.ID && e.Type == client.EventRefused {
			refused++
		}
	}
	for _, task := range owned {
		if !slices.Contains(h.stateful, task) {
			continue
		}
		seq, ok := record.TakeoverSeq(rep.Records[task], before[task])
		if !ok {
			t.Errorf("%s: no epoch marker above the paused worker's epoch %d in its changelog", task, before[task])
			continue
		}
		for _, e := range rep.Events {
			if e.Member == victim.ID && e.Task == task && e.Type == client.EventCommit && e.Epoch == before[task] && e.Seq > seq {
				t.Errorf("%s: a commit of the paused worker at seq %d (epoch %d) was acknowledged after the takeover at seq %d", task, e.Seq, e.Epoch, seq)
			}
		}
	}
	h.Logf("the worker of %s after SIGCONT: %d commits refused", victim.ID, refused)
}

// TestWorkerRestartedWithinTimeout kills -9 a member's worker and starts it
// again at once, well within the worker timeout: nothing moves. Every task
// keeps its owner and its epoch past the timeout, no task is activated
// anywhere, and the restarted worker resumes its tasks from their
// checkpoints with exact counts.
func TestWorkerRestartedWithinTimeout(t *testing.T) {
	skipShort(t)
	o := DefaultOptions()
	o.WorkerTimeout = 15 * time.Second // far more than a worker's restart here
	h := New(t, o)
	ids := []string{"m1", "m2", "m3"}
	h.Start(3)
	gv := h.mustGroup()
	victim, owned := h.victimOf(gv, ids...)
	owners := map[string]string{}
	for _, gt := range gv.Tasks {
		owners[gt.ID] = gt.Active
	}
	before := Epochs(gv)
	mark := h.Mark()

	killed := time.Now()
	if err := victim.KillWorker(); err != nil {
		t.Fatal(err)
	}
	h.StartWorker(victim)
	h.Logf("restarted the worker of %s (-9, then start) in %s; it owns %v", victim.ID, time.Since(killed).Round(time.Millisecond), owned)
	h.Hold("every task on its owner at its epoch past the worker timeout", time.Until(killed.Add(o.WorkerTimeout+2*time.Second)), func() error {
		gv, err := h.Group()
		if err != nil {
			return nil // a read that failed shows nothing
		}
		for _, gt := range gv.Tasks {
			if gt.Active != owners[gt.ID] || gt.Epoch != before[gt.ID] || gt.Revoking != "" {
				return fmt.Errorf("%s on %q at epoch %d (revoking to %q), was on %s at epoch %d",
					gt.ID, gt.Active, gt.Epoch, gt.Revoking, owners[gt.ID], before[gt.ID])
			}
		}
		return nil
	})
	if s := WorkerState(h.mustGroup(), victim.ID); s != api.WorkerAttached {
		t.Errorf("worker of %s after its restart: %q, want %q", victim.ID, s, api.WorkerAttached)
	}
	h.WaitCommitting(60*time.Second, 3)
	rep := h.Verify(Expect{Planned: true, Mark: mark})
	if len(rep.Activations) > 0 {
		t.Errorf("%d activations after a worker restart within the timeout, e.g. %+v; want none", len(rep.Activations), rep.Activations[0])
	}
}

// TestWorkerStartsLate adds a member whose worker starts 3 s after its
// agent, as with a native sidecar in Kubernetes. Meanwhile the member warms
// tasks (learners) but owns none; once its worker polls, its tasks move to
// it, warm. No hand-off pause includes the worker's start-up: every
// release of a task to the new member comes after its worker started.
func TestWorkerStartsLate(t *testing.T) {
	skipShort(t)
	h := New(t, DefaultOptions())
	h.Start(3)
	mark := h.Mark()

	m4 := h.AddAgent("m4")
	warming := false
	h.Hold("m4 owns no task while its worker is not up", 3*time.Second, func() error {
		gv, err := h.Group()
		if err != nil {
			return nil // a read that failed shows nothing
		}
		if stateful, stateless := Owned(gv, "m4"); len(stateful)+len(stateless) > 0 {
			return fmt.Errorf("m4 owns %v %v before its worker started", stateful, stateless)
		}
		for _, mv := range gv.Members {
			if mv.ID == "m4" {
				if mv.Worker != "" && mv.Worker != api.WorkerDetached {
					return fmt.Errorf("m4's worker is %q before it started, want %q", mv.Worker, api.WorkerDetached)
				}
				warming = warming || len(mv.Learning)+len(mv.Standby) > 0
			}
		}
		return nil
	})
	if !warming {
		t.Errorf("m4 warmed no task while its worker was not up: learners should start at once")
	}
	workerStarted := time.Now()
	h.StartWorker(m4)
	h.WaitSettled(90*time.Second, "m1", "m2", "m3", "m4")
	h.WaitCommitting(60*time.Second, 3)
	rep := h.Verify(Expect{Planned: true, Mark: mark})

	var toNew []time.Duration
	for _, p := range pausesTo(rep.Pauses, "m4") {
		toNew = append(toNew, p.Duration)
		if p.Start.Before(workerStarted) {
			t.Errorf("%s was released to m4 at %s, before m4's worker started (%s): its pause includes the worker's start-up",
				p.Task, p.Start.Format("15:04:05.000"), workerStarted.Format("15:04:05.000"))
		}
	}
	if len(toNew) == 0 {
		t.Fatal("no hand-off to m4 was recorded")
	}
	h.Logf("hand-offs to m4: %d; p50 %s, max %s", len(toNew),
		record.Percentile(toNew, 50).Round(time.Microsecond), record.Percentile(toNew, 100).Round(time.Microsecond))
}

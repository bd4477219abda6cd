package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
)

// workerAgent is an Agent with just what the worker watch uses, requiring
// a worker with a timeout of 10 s, started at start.
func workerAgent(start time.Time, tasks ...*task) *Agent {
	a := releaseAgent(4, tasks...)
	a.opts.RequireWorker, a.opts.WorkerTimeout = true, 10*time.Second
	a.log = zerolog.Nop()
	a.metrics = newMetrics(nil)
	a.hbKick = make(chan struct{}, 1)
	a.worker = newWorkerWatch(true, start)
	return a
}

func servedTask(id string, epoch, lastSeq uint64) *task {
	return &task{id: id, stateful: true, phase: phaseActive, epoch: epoch, lastSeq: lastSeq}
}

// TestWorkerLost: a worker detached for the worker timeout is lost: its
// agent releases each active task at its last acknowledged commit,
// refuses later commits, and its record says lost with the releases.
func TestWorkerLost(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	t1, t2 := servedTask("t1", 3, 41), servedTask("t2", 5, 97)
	learner := &task{id: "t3", stateful: true, phase: phaseLearner}
	activating := &task{id: "t4", stateful: true, phase: phaseActivating, epoch: 2}
	a := workerAgent(start, t1, t2, learner, activating)

	a.WorkerAttached(start.Add(time.Second))
	gone := start.Add(time.Minute)
	a.WorkerDetached(gone)
	if st, since := a.worker.state, a.worker.since; st != assign.WorkerDetached || !since.Equal(gone) {
		t.Fatalf("after WorkerDetached(%v): %s since %v, want detached since then", gone, st, since)
	}
	if a.CheckWorker(gone.Add(10*time.Second - time.Millisecond)) {
		t.Fatal("CheckWorker declared the worker lost before the worker timeout")
	}
	if !a.CheckWorker(gone.Add(10 * time.Second)) {
		t.Fatal("CheckWorker at the worker timeout did not declare the worker lost")
	}
	if st := a.worker.state; st != assign.WorkerLost {
		t.Errorf("worker state %s, want lost", st)
	}
	want := map[string]assign.Release{
		"t1": {Epoch: 3, Seq: 41, At: gone.Add(10 * time.Second), Generation: 4},
		"t2": {Epoch: 5, Seq: 97, At: gone.Add(10 * time.Second), Generation: 4},
	}
	if len(a.releases()) != len(want) {
		t.Errorf("releases %+v, want %+v", a.releases(), want)
	}
	for id, w := range want {
		if r := a.releases()[id]; r != w {
			t.Errorf("release of %s = %+v, want %+v", id, r, w)
		}
	}
	if _, err := a.Commit(context.Background(), "t1", api.CommitRequest{Epoch: 3}); !errors.Is(err, api.ErrNotOwner) {
		t.Errorf("commit after the worker was lost = %v, want ErrNotOwner", err)
	}
	if st := t1.state(); st.phase != phaseReleased {
		t.Errorf("t1 after the worker was lost: %v, want released", st.phase)
	}
	if st := activating.state(); st.phase != phaseActivating {
		t.Errorf("t4, still becoming active, after the worker was lost: %v, want it left activating", st.phase)
	}
	if a.CheckWorker(gone.Add(time.Hour)) {
		t.Error("CheckWorker declared a lost worker lost again")
	}
}

// TestWorkerBackWithinTimeout: a worker that polls again before the
// timeout keeps its tasks; nothing is released.
func TestWorkerBackWithinTimeout(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := workerAgent(start, servedTask("t1", 3, 41))
	a.WorkerAttached(start)
	a.WorkerDetached(start.Add(time.Second))
	a.WorkerAttached(start.Add(5 * time.Second))
	if a.CheckWorker(start.Add(time.Hour)) || len(a.releases()) > 0 {
		t.Errorf("an attached worker was declared lost: releases %+v", a.releases())
	}
	if st := a.worker.state; st != assign.WorkerAttached {
		t.Errorf("worker state %s, want attached", st)
	}
}

// TestWorkerNeverAttached: the timeout runs from the agent's start when no
// worker ever polls.
func TestWorkerNeverAttached(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := workerAgent(start, servedTask("t1", 3, 41))
	if !a.CheckWorker(start.Add(10 * time.Second)) {
		t.Fatal("a worker that never attached was not declared lost after the timeout from the start")
	}
	if _, ok := a.releases()["t1"]; !ok {
		t.Error("t1 was not released")
	}
}

// TestWorkerBackAfterLoss: a worker that comes back after it was lost is
// attached again; a task its agent released for it that the group has not
// moved (still active here at the same epoch, not revoked) is its own
// again, and the release is withdrawn; a revoked one stays released.
func TestWorkerBackAfterLoss(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	kept, revoked := servedTask("t1", 3, 41), servedTask("t2", 5, 97)
	a := workerAgent(start, kept, revoked)
	a.CheckWorker(start.Add(time.Minute))
	revoked.revoke = toNobody
	a.WorkerAttached(start.Add(2 * time.Minute))
	if st := a.worker.state; st != assign.WorkerAttached {
		t.Errorf("worker state %s, want attached", st)
	}
	if st := kept.state(); st.phase != phaseActive {
		t.Errorf("t1, still active here, is %v after the worker came back, want active", st.phase)
	}
	if _, ok := a.releases()["t1"]; ok {
		t.Error("the release of t1 was not withdrawn")
	}
	if st := revoked.state(); st.phase != phaseReleased || a.releases()["t2"].Epoch != 5 {
		t.Errorf("t2, being revoked: %v, release %+v; want it kept released", st.phase, a.releases()["t2"])
	}
}

// TestKeepWorkerReleases: a release made for a lost worker holds while its
// task stays active here at that epoch, revoked or not, and is dropped
// with the task.
func TestKeepWorkerReleases(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	stays, leaves := servedTask("a", 3, 10), servedTask("b", 4, 20)
	a := workerAgent(start, stays, leaves)
	a.CheckWorker(start.Add(time.Minute))
	a.mu.Lock()
	a.reconcileLocked("a", desired{role: api.RoleActive, epoch: 3}, 5)
	leaves.mu.Lock()
	a.apply(leaves, change{ev: evDrop})
	leaves.mu.Unlock()
	a.mu.Unlock()
	if r, ok := a.releases()["a"]; !ok || r.Generation != 5 {
		t.Errorf("release of a = %+v, %v; want kept at generation 5", r, ok)
	}
	if r, ok := a.releases()["b"]; ok {
		t.Errorf("release of b = %+v kept after b left, want it dropped", r)
	}
}

// TestWorkerNotRequired: without RequireWorker the agent tracks nothing
// and the record says nothing of a worker.
func TestWorkerNotRequired(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := workerAgent(start, servedTask("t1", 3, 41))
	a.opts.RequireWorker = false
	a.worker = newWorkerWatch(false, start)
	a.WorkerAttached(start)
	a.WorkerDetached(start)
	if a.CheckWorker(start.Add(time.Hour)) || len(a.releases()) > 0 {
		t.Errorf("an agent that requires no worker released %+v", a.releases())
	}
	if st := a.worker.state; st != "" {
		t.Errorf("worker state %q, want none", st)
	}
}

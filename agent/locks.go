package agent

import (
	"slices"
	"strings"
)

// taskLocks holds the locks of one or more tasks, taken in their order
// (docs/ARCHITECTURE.md, "Locks"): each task's commitMu when asked for, then
// a.mu, then each task's mu; tasks by ID. It is the one place that order is
// written out. (A task's record cache lock, recordCache.applying, falls
// between its commitMu and a.mu; the commit path takes it, never under
// these.) Its methods are for the goroutine that took the locks.
type taskLocks struct {
	a      *Agent
	ts     []*task
	commit bool // the tasks' commitMu are held
	state  bool // a.mu and the tasks' mu are held
}

// lockTasks takes the locks of ts (distinct tasks) in their order: with
// commit, their commitMu first.
func (a *Agent) lockTasks(commit bool, ts ...*task) *taskLocks {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(x, y *task) int { return strings.Compare(x.id, y.id) })
	l := &taskLocks{a: a, ts: ts, commit: commit}
	if commit {
		for _, t := range ts {
			t.commitMu.Lock()
		}
	}
	l.lockState()
	return l
}

// lockState takes a.mu and the tasks' mu again, under the commit locks
// still held.
func (l *taskLocks) lockState() {
	l.a.mu.Lock()
	for _, t := range l.ts {
		t.mu.Lock()
	}
	l.state = true
}

// unlockState releases a.mu and the tasks' mu and keeps their commit
// locks: a release entry is appended under its task's commit lock only.
func (l *taskLocks) unlockState() {
	if !l.state {
		return
	}
	for i := len(l.ts) - 1; i >= 0; i-- {
		l.ts[i].mu.Unlock()
	}
	l.a.mu.Unlock()
	l.state = false
}

// unlock releases every lock still held, in reverse order. It may be
// called again (deferred after an early unlock).
func (l *taskLocks) unlock() {
	l.unlockState()
	if !l.commit {
		return
	}
	for i := len(l.ts) - 1; i >= 0; i-- {
		l.ts[i].commitMu.Unlock()
	}
	l.commit = false
}

// Package httpapitest is a test helper: an in-memory implementation of
// httpapi.Backend, for the tests of the API itself and of what talks to it
// (the Go client, the counter worker). It is a real implementation of the
// contract of docs/api.md for one member, "m1" — roles, epochs, revokes,
// releases, state, commits and a leave — not a recording of expected
// calls; the test places tasks on it and moves them, and reads back what
// the worker did.
//
// It imports api only, so that httpapi's own tests can use it.
package httpapitest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/handoffhq/handoff/api"
)

// Member is the member the Backend serves.
const Member = "m1"

// Task is what a test sets of one task: all but its ID.
type Task struct {
	Role      string // api.Role*
	Epoch     uint64
	Stateless bool
	// Checkpoint is the worker's last checkpoint, and Seq the changelog
	// sequence the member's copy has applied: what the view shows of an
	// active task.
	Checkpoint string
	Seq        uint64
	Data       map[string]string
}

type task struct {
	role       string
	stateless  bool
	epoch      uint64
	revoked    bool
	released   bool
	seq        uint64
	checkpoint []byte
	data       map[string][]byte
}

// Backend is an in-memory httpapi.Backend. Its methods are safe for
// concurrent use. A task released through the API leaves the view but
// keeps its state, as the changelog does: Move brings it back with it.
type Backend struct {
	mu      sync.Mutex
	version uint64
	state   string // the member's state: api.StateMember, Leaving or Done
	down    bool   // the view says shutdown
	leaving *time.Time
	order   []string // task IDs in the order they were first placed
	tasks   map[string]*task
	ready   error
	fail    map[string]error // method → the error it returns instead of working
	calls   map[string]int   // method → calls
	ops     []string         // the mutations, in order: "commit t1 <checkpoint>", "release t1", "leave"
	last    Last

	changed  chan struct{} // closed and replaced when the view changes
	progress chan struct{} // closed and replaced on every change, commits included
	waiting  chan time.Time
}

// Last is what the most recent calls carried.
type Last struct {
	Task    string // of the last Release, Get, GetMany, Scan, Commit or Query
	Commit  api.CommitRequest
	Get     []byte
	GetMany [][]byte
	Scan    api.ScanOptions
	Query   api.Query
}

// New returns a Backend for member m1, in generation 1, with no tasks.
func New() *Backend {
	return &Backend{
		version:  1,
		state:    api.StateMember,
		tasks:    map[string]*task{},
		fail:     map[string]error{},
		calls:    map[string]int{},
		changed:  make(chan struct{}),
		progress: make(chan struct{}),
		waiting:  make(chan time.Time, 16),
	}
}

// change runs fn under the lock and publishes a new view.
func (b *Backend) change(fn func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fn()
	b.bumpLocked()
}

func (b *Backend) bumpLocked() {
	b.version++
	close(b.changed)
	b.changed = make(chan struct{})
	b.progressLocked()
}

func (b *Backend) progressLocked() {
	close(b.progress)
	b.progress = make(chan struct{})
}

// placeLocked returns task id, placing a new one at the end of the view.
func (b *Backend) placeLocked(id string) *task {
	t, ok := b.tasks[id]
	if !ok {
		t = &task{data: map[string][]byte{}}
		b.tasks[id] = t
		b.order = append(b.order, id)
	}
	return t
}

// Set places task id on the member as t says, replacing all it had (its
// state, a revoke, a release).
func (b *Backend) Set(id string, t Task) {
	b.change(func() {
		nt := b.placeLocked(id)
		*nt = task{role: t.Role, stateless: t.Stateless, epoch: t.Epoch, seq: t.Seq, data: map[string][]byte{}}
		if t.Checkpoint != "" {
			nt.checkpoint = []byte(t.Checkpoint)
		}
		for k, v := range t.Data {
			nt.data[k] = []byte(v)
		}
	})
}

// Move places task id on the member in role at epoch, with the state it
// kept (none, for a new task), and no revoke or release: the task comes
// back to the member, or changes role on it.
func (b *Backend) Move(id, role string, epoch uint64) {
	b.change(func() {
		t := b.placeLocked(id)
		t.role, t.epoch, t.revoked, t.released = role, epoch, false, false
	})
}

// SetValue sets key to value in task id's state, as a commit would,
// without changing the view.
func (b *Backend) SetValue(id, key, value string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tasks[id].data[key] = []byte(value)
	b.progressLocked()
}

// SetRole changes a task's role, keeping the rest.
func (b *Backend) SetRole(id, role string) { b.change(func() { b.tasks[id].role = role }) }

// SetSeq sets the changelog sequence a task's copy has applied, keeping
// the rest.
func (b *Backend) SetSeq(id string, seq uint64) { b.change(func() { b.tasks[id].seq = seq }) }

// SetEpoch changes a task's epoch, keeping the rest.
func (b *Backend) SetEpoch(id string, epoch uint64) { b.change(func() { b.tasks[id].epoch = epoch }) }

// Revoke lists a task under the view's revoke.
func (b *Backend) Revoke(id string) { b.change(func() { b.tasks[id].revoked = true }) }

// Remove takes a task off the member, with its state.
func (b *Backend) Remove(id string) {
	b.change(func() {
		delete(b.tasks, id)
		b.order = slices.DeleteFunc(b.order, func(o string) bool { return o == id })
	})
}

// Clear takes every task off the member.
func (b *Backend) Clear() {
	b.change(func() { b.tasks, b.order = map[string]*task{}, nil })
}

// SetState sets the member's state in the view (api.StateDone, say).
func (b *Backend) SetState(state string) { b.change(func() { b.state = state }) }

// Shutdown makes the view tell the worker to shut down.
func (b *Backend) Shutdown() { b.change(func() { b.down = true }) }

// Bump publishes a new view version with nothing else changed.
func (b *Backend) Bump() { b.change(func() {}) }

// Fail makes method (a Backend method's name) return err instead of
// working, until it is set to nil. "CommitAck" is a commit that is applied
// but answered with err, as when its acknowledgement is lost.
func (b *Backend) Fail(method string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail[method] = err
}

// SetReady sets what Ready returns.
func (b *Backend) SetReady(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ready = err
}

// Calls returns how many times method was called.
func (b *Backend) Calls(method string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[method]
}

// Mutations counts the calls of the methods that change something:
// Commit, Release and Leave.
func (b *Backend) Mutations() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls["Commit"] + b.calls["Release"] + b.calls["Leave"]
}

// Ops returns the mutations that took effect, in order: "commit <task>
// <checkpoint>", "release <task>", "leave".
func (b *Backend) Ops() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.ops)
}

// Last returns what the most recent calls carried.
func (b *Backend) Last() Last {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// Value returns the value of key in task's state.
func (b *Backend) Value(task, key string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tasks[task]
	if !ok {
		return "", false
	}
	v, ok := t.data[key]
	return string(v), ok
}

// Checkpoint returns task's last checkpoint.
func (b *Backend) Checkpoint(task string) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.tasks[task]; ok {
		return bytes.Clone(t.checkpoint)
	}
	return nil
}

// Released reports whether the worker released task.
func (b *Backend) Released(task string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tasks[task]
	return ok && t.released
}

// Progress returns a channel closed at the next change: of the view, or a
// commit.
func (b *Backend) Progress() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.progress
}

// Waiting delivers the deadline of each WaitAssignment call as it starts
// to wait (zero if it has none), so that a test knows a long-poll is
// parked; calls that find it full do not wait for it.
func (b *Backend) Waiting() <-chan time.Time { return b.waiting }

// enter counts a call and returns its forced error, if any; b.mu is held.
func (b *Backend) enter(method string) error {
	b.calls[method]++
	return b.fail[method]
}

func (b *Backend) viewLocked() api.View {
	v := api.View{Member: Member, Generation: 1, Version: b.version, State: b.state, Shutdown: b.down}
	for _, id := range b.order {
		t := b.tasks[id]
		if t.released {
			continue
		}
		tv := api.TaskView{ID: id, Role: t.role, Stateful: !t.stateless, Epoch: t.epoch}
		if t.role == api.RoleActive {
			tv.Checkpoint, tv.Seq = t.checkpoint, t.seq
		}
		v.Tasks = append(v.Tasks, tv)
		if t.revoked {
			v.Revoke = append(v.Revoke, id)
		}
	}
	return v
}

// Assignment returns the current view.
func (b *Backend) Assignment() api.View {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls["Assignment"]++
	return b.viewLocked()
}

// WaitAssignment returns the view once its version passes after, or the
// current one when ctx ends.
func (b *Backend) WaitAssignment(ctx context.Context, after uint64) api.View {
	b.mu.Lock()
	b.calls["WaitAssignment"]++
	b.mu.Unlock()
	announced := false
	for {
		b.mu.Lock()
		v, ch := b.viewLocked(), b.changed
		b.mu.Unlock()
		if v.Version > after {
			return v
		}
		if !announced {
			announced = true
			deadline, _ := ctx.Deadline()
			select {
			case b.waiting <- deadline:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return v
		case <-ch:
		}
	}
}

// assignedLocked returns task id if it is on the member.
func (b *Backend) assignedLocked(id string) (*task, error) {
	t, ok := b.tasks[id]
	if !ok || t.released {
		return nil, fmt.Errorf("task %s is not assigned to member %s; read /assignment: %w", id, Member, api.ErrUnknownTask)
	}
	return t, nil
}

// activeLocked returns task id if the member may read and write it.
func (b *Backend) activeLocked(id string) (*task, error) {
	t, err := b.assignedLocked(id)
	if err != nil {
		return nil, err
	}
	if t.role != api.RoleActive {
		return nil, fmt.Errorf("task %s is not active on member %s (it is a %s); read /assignment: %w", id, Member, t.role, api.ErrNotOwner)
	}
	return t, nil
}

// Release records that the worker stopped a revoked task.
func (b *Backend) Release(_ context.Context, id string, epoch uint64) (api.ReleaseResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last.Task = id
	if err := b.enter("Release"); err != nil {
		return api.ReleaseResult{}, err
	}
	t, err := b.assignedLocked(id)
	if err != nil {
		return api.ReleaseResult{}, err
	}
	if epoch != 0 && epoch != t.epoch {
		return api.ReleaseResult{}, fmt.Errorf("release of task %s at epoch %d, but it is at epoch %d: %w", id, epoch, t.epoch, api.ErrNotOwner)
	}
	if !t.revoked {
		return api.ReleaseResult{}, fmt.Errorf("task %s is not being revoked from member %s; release only tasks listed under revoke: %w", id, Member, api.ErrNotRevoked)
	}
	t.released = true
	b.ops = append(b.ops, "release "+id)
	b.bumpLocked()
	return api.ReleaseResult{Task: id, Epoch: t.epoch, Seq: t.seq}, nil
}

// Get reads one key of an active task.
func (b *Backend) Get(id string, key []byte) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last.Task = id
	if err := b.enter("Get"); err != nil {
		return nil, err
	}
	b.last.Get = bytes.Clone(key)
	t, err := b.activeLocked(id)
	if err != nil {
		return nil, err
	}
	v, ok := t.data[string(key)]
	if !ok {
		return nil, fmt.Errorf("task %s has no key %q: %w", id, key, api.ErrNotFound)
	}
	return bytes.Clone(v), nil
}

// GetMany reads keys of an active task at once.
func (b *Backend) GetMany(id string, keys [][]byte, maxBytes int) ([][]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last.Task = id
	if err := b.enter("GetMany"); err != nil {
		return nil, err
	}
	b.last.GetMany = nil
	for _, k := range keys {
		b.last.GetMany = append(b.last.GetMany, bytes.Clone(k))
	}
	t, err := b.activeLocked(id)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	total := 0
	for i, k := range keys {
		if v, ok := t.data[string(k)]; ok {
			out[i] = append([]byte{}, v...)
			total += len(v)
		}
	}
	if total > maxBytes {
		return nil, fmt.Errorf("the values total %d bytes, over %d: %w", total, maxBytes, api.ErrTooLarge)
	}
	return out, nil
}

// Scan lists an active task's keys in order.
func (b *Backend) Scan(id string, o api.ScanOptions) ([]api.KV, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last.Task = id
	if err := b.enter("Scan"); err != nil {
		return nil, err
	}
	b.last.Scan = o
	t, err := b.activeLocked(id)
	if err != nil {
		return nil, err
	}
	return scanLocked(t, o), nil
}

// scanLocked lists t's keys as o says; b.mu is held.
func scanLocked(t *task, o api.ScanOptions) []api.KV {
	keys := make([]string, 0, len(t.data))
	for k := range t.data {
		if strings.HasPrefix(k, string(o.Prefix)) && k >= string(o.Start) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if o.Limit > 0 && len(keys) > o.Limit {
		keys = keys[:o.Limit]
	}
	out := make([]api.KV, 0, len(keys))
	for _, k := range keys {
		out = append(out, api.KV{Key: []byte(k), Value: bytes.Clone(t.data[k])})
	}
	return out
}

// Query answers from the member's own copy of a task it holds, in any
// role, at the copy's Seq: a learner's copy stands in for a standby's,
// within any max_lag but below any min_seq past its Seq. The Backend
// routes nothing: a bound its copy does not meet is refused as one no
// copy met (ErrUnavailable).
func (b *Backend) Query(_ context.Context, q api.Query) (api.QueryAnswer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last.Task = q.Task
	b.last.Query = q
	if err := b.enter("Query"); err != nil {
		return api.QueryAnswer{}, err
	}
	t, ok := b.tasks[q.Task]
	switch {
	case !ok:
		return api.QueryAnswer{}, fmt.Errorf("%w: task %s is not in the group", api.ErrUnknownTask, q.Task)
	case t.stateless:
		return api.QueryAnswer{}, fmt.Errorf("%w: task %s is stateless", api.ErrInvalid, q.Task)
	case t.seq < q.Bound.MinSeq:
		return api.QueryAnswer{}, fmt.Errorf("%w: no copy of task %s met the bound", api.ErrUnavailable, q.Task)
	}
	ans := api.QueryAnswer{Served: api.Served{Member: Member, Role: t.role, Seq: t.seq}}
	switch q.Kind {
	case api.QueryGet, api.QueryGetMany:
		for _, k := range q.Keys {
			v, ok := t.data[string(k)]
			if ok && v == nil {
				v = []byte{}
			}
			ans.Values = append(ans.Values, bytes.Clone(v))
		}
	case api.QueryScan:
		ans.Items = scanLocked(t, q.Scan)
	}
	return ans, nil
}

// Commit applies a commit to an active, stateful task at its epoch (or at
// epoch 0, any).
func (b *Backend) Commit(_ context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last.Task = id
	if err := b.enter("Commit"); err != nil {
		return api.CommitResult{}, err
	}
	b.last.Commit = req
	t, err := b.activeLocked(id)
	if err != nil {
		return api.CommitResult{}, err
	}
	if t.stateless {
		return api.CommitResult{}, fmt.Errorf("task %s is stateless: it has no state to commit: %w", id, api.ErrInvalid)
	}
	if req.Epoch != 0 && req.Epoch != t.epoch {
		return api.CommitResult{}, fmt.Errorf("task %s is at epoch %d on member %s, the commit is for epoch %d; restart the task from /assignment: %w", id, t.epoch, Member, req.Epoch, api.ErrNotOwner)
	}
	for _, kv := range req.Puts {
		t.data[string(kv.Key)] = bytes.Clone(kv.Value)
	}
	for _, k := range req.Deletes {
		delete(t.data, string(k))
	}
	if len(req.Checkpoint) > 0 {
		t.checkpoint = bytes.Clone(req.Checkpoint)
	}
	t.seq++
	b.ops = append(b.ops, fmt.Sprintf("commit %s %s", id, req.Checkpoint))
	b.progressLocked()
	if err := b.fail["CommitAck"]; err != nil {
		return api.CommitResult{}, err // committed, but the acknowledgement is lost
	}
	return api.CommitResult{Task: id, Seq: t.seq, Epoch: t.epoch}, nil
}

// leaveTime is when every Backend's leave started.
var leaveTime = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// Leave starts the member's leave: its state is leaving from then on.
func (b *Backend) Leave(context.Context) (api.LeaveStatus, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.enter("Leave"); err != nil {
		return api.LeaveStatus{}, err
	}
	if b.leaving == nil {
		at := leaveTime
		b.leaving = &at
		b.state = api.StateLeaving
		b.ops = append(b.ops, "leave")
		b.bumpLocked()
	}
	return b.leaveLocked(), nil
}

func (b *Backend) leaveLocked() api.LeaveStatus {
	st := api.LeaveStatus{State: b.state, Started: b.leaving, Remaining: []string{}}
	for _, id := range b.order {
		if t := b.tasks[id]; t.role == api.RoleActive && !t.released {
			st.Remaining = append(st.Remaining, id)
		}
	}
	sort.Strings(st.Remaining)
	return st
}

// LeaveStatus reports the leave.
func (b *Backend) LeaveStatus() api.LeaveStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leaveLocked()
}

// Group returns a group "demo" of this one member, its leader.
func (b *Backend) Group(context.Context) (api.GroupView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.enter("Group"); err != nil {
		return api.GroupView{}, err
	}
	return api.GroupView{Group: "demo", Generation: 1, Leader: Member,
		Members: []api.MemberView{{ID: Member, Capacity: 1, State: b.state}}}, nil
}

// Ready returns what SetReady set.
func (b *Backend) Ready() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ready
}

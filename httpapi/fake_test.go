package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/handoffhq/handoff/api"
)

// fakeBackend is an in-memory Backend for the handler tests: one member,
// "m1", with tasks whose role, epoch and state the test sets. It is a real
// implementation of the contract, not a recording of expected calls.
type fakeBackend struct {
	mu      sync.Mutex
	view    api.View
	changed chan struct{} // closed and replaced when the view changes
	tasks   map[string]*fakeTask
	ready   error
	leaving *time.Time
	fail    map[string]error // method name → error it returns instead of working
	calls   map[string]int   // method name → number of calls

	// waiting receives the deadline of each WaitAssignment call as it
	// starts to wait (zero if none); tests use it to know a long-poll is parked.
	waiting chan time.Time

	lastTask    string // task of the last Release, Get, Scan or Commit
	lastCommit  api.CommitRequest
	lastGet     []byte
	lastGetMany [][]byte
	lastScan    api.ScanOptions
	lastQuery   api.Query
}

type fakeTask struct {
	role       string
	stateful   bool
	epoch      uint64
	revoked    bool
	released   bool
	seq        uint64
	checkpoint []byte
	data       map[string][]byte
}

func newFake() *fakeBackend {
	f := &fakeBackend{
		view:    api.View{Member: "m1", Generation: 1, Version: 1, State: api.StateMember},
		changed: make(chan struct{}),
		tasks:   map[string]*fakeTask{},
		fail:    map[string]error{},
		calls:   map[string]int{},
		waiting: make(chan time.Time, 16),
	}
	return f
}

// addTask puts a task on the member and bumps the view.
func (f *fakeBackend) addTask(id, role string, epoch uint64, data map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTask{role: role, stateful: true, epoch: epoch, data: map[string][]byte{}}
	for k, v := range data {
		t.data[k] = []byte(v)
	}
	f.tasks[id] = t
	f.bumpLocked()
}

// revoke lists a task under View.Revoke and bumps the view.
func (f *fakeBackend) revoke(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tasks[id].revoked = true
	f.bumpLocked()
}

func (f *fakeBackend) bump() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bumpLocked()
}

func (f *fakeBackend) bumpLocked() {
	f.view.Version++
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeBackend) setFail(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = err
}

func (f *fakeBackend) setReady(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready = err
}

// mutations counts calls of the methods that change something.
func (f *fakeBackend) mutations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls["Commit"] + f.calls["Release"] + f.calls["Leave"]
}

func (f *fakeBackend) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// enter counts a call and returns its forced error, if any. f.mu is held.
func (f *fakeBackend) enter(method string) error {
	f.calls[method]++
	return f.fail[method]
}

func (f *fakeBackend) viewLocked() api.View {
	v := f.view
	v.Tasks, v.Revoke = nil, nil
	ids := make([]string, 0, len(f.tasks))
	for id := range f.tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		t := f.tasks[id]
		if t.released {
			continue
		}
		tv := api.TaskView{ID: id, Role: t.role, Stateful: t.stateful, Epoch: t.epoch}
		if t.role == api.RoleActive {
			tv.Checkpoint = t.checkpoint
		}
		v.Tasks = append(v.Tasks, tv)
		if t.revoked {
			v.Revoke = append(v.Revoke, id)
		}
	}
	return v
}

func (f *fakeBackend) Assignment() api.View {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["Assignment"]++
	return f.viewLocked()
}

func (f *fakeBackend) WaitAssignment(ctx context.Context, after uint64) api.View {
	f.mu.Lock()
	f.calls["WaitAssignment"]++
	f.mu.Unlock()
	announced := false
	for {
		f.mu.Lock()
		v, ch := f.viewLocked(), f.changed
		f.mu.Unlock()
		if v.Version > after {
			return v
		}
		if !announced {
			announced = true
			deadline, _ := ctx.Deadline()
			select {
			case f.waiting <- deadline:
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

// activeLocked returns the task if this member may read and write it.
func (f *fakeBackend) activeLocked(id string) (*fakeTask, error) {
	t, ok := f.tasks[id]
	if !ok || t.released {
		return nil, fmt.Errorf("task %s is not assigned to member m1; read /assignment: %w", id, api.ErrUnknownTask)
	}
	if t.role != api.RoleActive {
		return nil, fmt.Errorf("task %s is not active on member m1 (it is a %s); read /assignment: %w", id, t.role, api.ErrNotOwner)
	}
	return t, nil
}

func (f *fakeBackend) Release(_ context.Context, id string, epoch uint64) (api.ReleaseResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastTask = id
	if err := f.enter("Release"); err != nil {
		return api.ReleaseResult{}, err
	}
	t, ok := f.tasks[id]
	if !ok {
		return api.ReleaseResult{}, fmt.Errorf("task %s is not assigned to member m1: %w", id, api.ErrUnknownTask)
	}
	if epoch != 0 && epoch != t.epoch {
		return api.ReleaseResult{}, fmt.Errorf("release of task %s at epoch %d, but it is at epoch %d: %w", id, epoch, t.epoch, api.ErrNotOwner)
	}
	if !t.revoked {
		return api.ReleaseResult{}, fmt.Errorf("task %s is not being revoked from member m1; release only tasks listed under revoke: %w", id, api.ErrNotRevoked)
	}
	t.released = true
	f.bumpLocked()
	return api.ReleaseResult{Task: id, Epoch: t.epoch, Seq: t.seq}, nil
}

func (f *fakeBackend) Get(id string, key []byte) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastTask = id
	if err := f.enter("Get"); err != nil {
		return nil, err
	}
	f.lastGet = bytes.Clone(key)
	t, err := f.activeLocked(id)
	if err != nil {
		return nil, err
	}
	v, ok := t.data[string(key)]
	if !ok {
		return nil, fmt.Errorf("task %s has no key %q: %w", id, key, api.ErrNotFound)
	}
	return v, nil
}

func (f *fakeBackend) GetMany(id string, keys [][]byte, maxBytes int) ([][]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastTask = id
	if err := f.enter("GetMany"); err != nil {
		return nil, err
	}
	f.lastGetMany = nil
	for _, k := range keys {
		f.lastGetMany = append(f.lastGetMany, bytes.Clone(k))
	}
	t, err := f.activeLocked(id)
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

func (f *fakeBackend) Scan(id string, o api.ScanOptions) ([]api.KV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastTask = id
	if err := f.enter("Scan"); err != nil {
		return nil, err
	}
	f.lastScan = o
	t, err := f.activeLocked(id)
	if err != nil {
		return nil, err
	}
	return f.scanTask(t, o)
}

// scanTask is Scan of t, which the caller has found.
func (f *fakeBackend) scanTask(t *fakeTask, o api.ScanOptions) ([]api.KV, error) {
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
		out = append(out, api.KV{Key: []byte(k), Value: t.data[k]})
	}
	return out, nil
}

func (f *fakeBackend) Commit(_ context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastTask = id
	if err := f.enter("Commit"); err != nil {
		return api.CommitResult{}, err
	}
	f.lastCommit = req
	t, err := f.activeLocked(id)
	if err != nil {
		return api.CommitResult{}, err
	}
	if req.Epoch != 0 && req.Epoch != t.epoch {
		return api.CommitResult{}, fmt.Errorf("task %s is at epoch %d on member m1, the commit is for epoch %d; restart the task from /assignment: %w", id, t.epoch, req.Epoch, api.ErrNotOwner)
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
	return api.CommitResult{Task: id, Seq: t.seq, Epoch: t.epoch}, nil
}

func (f *fakeBackend) Leave(context.Context) (api.LeaveStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("Leave"); err != nil {
		return api.LeaveStatus{}, err
	}
	if f.leaving == nil {
		now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		f.leaving = &now
		f.view.State = api.StateLeaving
		f.bumpLocked()
	}
	return f.leaveLocked(), nil
}

func (f *fakeBackend) leaveLocked() api.LeaveStatus {
	st := api.LeaveStatus{State: f.view.State, Started: f.leaving}
	for id, t := range f.tasks {
		if t.role == api.RoleActive && !t.released {
			st.Remaining = append(st.Remaining, id)
		}
	}
	sort.Strings(st.Remaining)
	return st
}

func (f *fakeBackend) LeaveStatus() api.LeaveStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leaveLocked()
}

func (f *fakeBackend) Group(context.Context) (api.GroupView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("Group"); err != nil {
		return api.GroupView{}, err
	}
	return api.GroupView{Group: "demo", Generation: f.view.Generation, Leader: "m1",
		Members: []api.MemberView{{ID: "m1", Capacity: 1, State: f.view.State}}}, nil
}

func (f *fakeBackend) Ready() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready
}

package client

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi"
)

// fakeAgent is an in-memory httpapi.Backend: one member, "m1", whose tasks
// the test moves around. It keeps an ordered log of the mutating calls so
// tests can check what happened in which order.
type fakeAgent struct {
	mu       sync.Mutex
	version  uint64
	changed  chan struct{}
	tasks    map[string]*fakeTask
	order    []string // task IDs in the order they were added
	shutdown bool
	done     bool // view state "done" without the shutdown flag
	ready    error
	fail     map[string]error
	ops      []string // "commit t1 <checkpoint>", "release t1"
}

type fakeTask struct {
	role       string
	epoch      uint64
	revoked    bool
	seq        uint64
	checkpoint []byte
	data       map[string][]byte
}

func newFakeAgent() *fakeAgent {
	return &fakeAgent{version: 1, changed: make(chan struct{}), tasks: map[string]*fakeTask{}, fail: map[string]error{}}
}

// serveFake serves f's API over HTTP for the test's lifetime.
func serveFake(t *testing.T, f *fakeAgent, o httpapi.Options) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(httpapi.New(f, o).Handler())
	t.Cleanup(srv.Close)
	return srv
}

// change runs fn under the lock and publishes a new view version.
func (f *fakeAgent) change(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
	f.bumpLocked()
}

func (f *fakeAgent) bumpLocked() {
	f.version++
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeAgent) setTask(id, role string, epoch uint64, checkpoint string) {
	f.change(func() {
		if _, ok := f.tasks[id]; !ok {
			f.order = append(f.order, id)
		}
		f.tasks[id] = &fakeTask{role: role, epoch: epoch, checkpoint: []byte(checkpoint), data: map[string][]byte{}}
	})
}

// setTaskAt is setTask for a copy that has applied the changelog up to seq.
func (f *fakeAgent) setTaskAt(id, role string, epoch uint64, checkpoint string, seq uint64) {
	f.setTask(id, role, epoch, checkpoint)
	f.change(func() { f.tasks[id].seq = seq })
}

// setRole changes a task's role, keeping its epoch, data and checkpoint.
func (f *fakeAgent) setRole(id, role string) { f.change(func() { f.tasks[id].role = role }) }

func (f *fakeAgent) revoke(id string) { f.change(func() { f.tasks[id].revoked = true }) }

func (f *fakeAgent) setEpoch(id string, epoch uint64) {
	f.change(func() { f.tasks[id].epoch = epoch })
}

func (f *fakeAgent) remove(id string) { f.change(func() { f.removeLocked(id) }) }

func (f *fakeAgent) removeLocked(id string) {
	delete(f.tasks, id)
	for i, o := range f.order {
		if o == id {
			f.order = append(f.order[:i:i], f.order[i+1:]...)
			break
		}
	}
}

func (f *fakeAgent) setShutdown() { f.change(func() { f.shutdown = true }) }

func (f *fakeAgent) setFail(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = err
}

func (f *fakeAgent) opLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ops...)
}

func (f *fakeAgent) value(task, key string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.tasks[task].data[key]
	return string(v), ok
}

func (f *fakeAgent) viewLocked() api.View {
	v := api.View{Member: "m1", Generation: 1, Version: f.version, State: api.StateMember, Shutdown: f.shutdown}
	if f.done {
		v.State = api.StateDone
	}
	for _, id := range f.order {
		t := f.tasks[id]
		tv := api.TaskView{ID: id, Role: t.role, Stateful: true, Epoch: t.epoch}
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

func (f *fakeAgent) Assignment() api.View {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.viewLocked()
}

func (f *fakeAgent) WaitAssignment(ctx context.Context, after uint64) api.View {
	for {
		f.mu.Lock()
		v, ch := f.viewLocked(), f.changed
		f.mu.Unlock()
		if v.Version > after {
			return v
		}
		select {
		case <-ctx.Done():
			return v
		case <-ch:
		}
	}
}

func (f *fakeAgent) activeLocked(id string) (*fakeTask, error) {
	t, ok := f.tasks[id]
	if !ok {
		return nil, fmt.Errorf("task %s is not assigned to member m1: %w", id, api.ErrUnknownTask)
	}
	if t.role != api.RoleActive {
		return nil, fmt.Errorf("task %s is not active on member m1 (it is a %s): %w", id, t.role, api.ErrNotOwner)
	}
	return t, nil
}

func (f *fakeAgent) Release(_ context.Context, id string, epoch uint64) (api.ReleaseResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail["Release"]; err != nil {
		return api.ReleaseResult{}, err
	}
	t, ok := f.tasks[id]
	if !ok {
		return api.ReleaseResult{}, fmt.Errorf("task %s is not assigned to member m1: %w", id, api.ErrUnknownTask)
	}
	if epoch != 0 && epoch != t.epoch {
		return api.ReleaseResult{}, fmt.Errorf("task %s is at epoch %d, not %d: %w", id, t.epoch, epoch, api.ErrNotOwner)
	}
	if !t.revoked {
		return api.ReleaseResult{}, fmt.Errorf("task %s is not being revoked: %w", id, api.ErrNotRevoked)
	}
	f.ops = append(f.ops, "release "+id)
	f.removeLocked(id)
	f.bumpLocked()
	return api.ReleaseResult{Task: id, Epoch: t.epoch, Seq: t.seq}, nil
}

func (f *fakeAgent) Get(id string, key []byte) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
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

func (f *fakeAgent) GetMany(id string, keys [][]byte, _ int) ([][]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail["GetMany"]; err != nil {
		return nil, err
	}
	t, err := f.activeLocked(id)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if v, ok := t.data[string(k)]; ok {
			out[i] = append([]byte{}, v...)
		}
	}
	return out, nil
}

func (f *fakeAgent) Scan(id string, o api.ScanOptions) ([]api.KV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.activeLocked(id)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range t.data {
		if strings.HasPrefix(k, string(o.Prefix)) && k >= string(o.Start) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if o.Limit > 0 && len(keys) > o.Limit {
		keys = keys[:o.Limit]
	}
	out := []api.KV{}
	for _, k := range keys {
		out = append(out, api.KV{Key: []byte(k), Value: t.data[k]})
	}
	return out, nil
}

func (f *fakeAgent) Commit(_ context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail["Commit"]; err != nil {
		return api.CommitResult{}, err
	}
	t, err := f.activeLocked(id)
	if err != nil {
		return api.CommitResult{}, err
	}
	if req.Epoch != 0 && req.Epoch != t.epoch {
		return api.CommitResult{}, fmt.Errorf("task %s is at epoch %d, the commit is for epoch %d: %w", id, t.epoch, req.Epoch, api.ErrNotOwner)
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
	f.ops = append(f.ops, fmt.Sprintf("commit %s %s", id, req.Checkpoint))
	if err := f.fail["CommitAck"]; err != nil {
		// Committed, but the acknowledgement is lost.
		return api.CommitResult{}, err
	}
	return api.CommitResult{Task: id, Seq: t.seq, Epoch: t.epoch}, nil
}

func (f *fakeAgent) Leave(context.Context) (api.LeaveStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, "leave")
	return api.LeaveStatus{State: api.StateLeaving, Remaining: []string{}}, nil
}

func (f *fakeAgent) LeaveStatus() api.LeaveStatus {
	return api.LeaveStatus{State: api.StateMember, Remaining: []string{}}
}

func (f *fakeAgent) Group(context.Context) (api.GroupView, error) {
	return api.GroupView{Group: "demo", Leader: "m1"}, nil
}

func (f *fakeAgent) Ready() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready
}

// Query implements httpapi.Backend: the fake answers no query (the
// client has no query calls).
func (f *fakeAgent) Query(context.Context, api.Query) (api.QueryAnswer, error) {
	return api.QueryAnswer{}, fmt.Errorf("%w: the fake agent answers no queries", api.ErrUnavailable)
}

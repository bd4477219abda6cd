package countworker

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
)

// sidecar is an in-memory httpapi.Backend for one member, enough for the
// worker: tasks with roles and epochs, state, checkpoints, revokes and
// releases, and shutdown.
type sidecar struct {
	mu       sync.Mutex
	version  uint64
	changed  chan struct{} // closed and replaced on every change
	tasks    map[string]*sidecarTask
	order    []string
	released map[string]bool
	down     bool
	data     map[string]map[string][]byte // task → key → value; kept across releases, like the changelog
	// progress is closed and replaced on every change, commits included,
	// so tests can wait for the worker's progress.
	progress chan struct{}
	// singleGets and batchGets count the worker's reads.
	singleGets, batchGets int
}

type sidecarTask struct {
	role       string
	stateless  bool
	epoch      uint64
	revoked    bool
	seq        uint64
	checkpoint []byte
}

func newSidecar() *sidecar {
	return &sidecar{version: 1, changed: make(chan struct{}), progress: make(chan struct{}),
		tasks: map[string]*sidecarTask{}, released: map[string]bool{}, data: map[string]map[string][]byte{}}
}

// changeLocked publishes a new view.
func (s *sidecar) changeLocked() {
	s.version++
	close(s.changed)
	s.changed = make(chan struct{})
	s.progressLocked()
}

func (s *sidecar) progressLocked() {
	close(s.progress)
	s.progress = make(chan struct{})
}

func (s *sidecar) set(id, role string, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok {
		t = &sidecarTask{}
		s.tasks[id] = t
		s.order = append(s.order, id)
	}
	t.role, t.epoch, t.revoked = role, epoch, false
	delete(s.released, id)
	s.changeLocked()
}

// setStateless makes task id stateless: it has no state to commit.
func (s *sidecar) setStateless(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tasks[id].stateless = true
	s.changeLocked()
}

func (s *sidecar) revoke(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tasks[id].revoked = true
	s.changeLocked()
}

func (s *sidecar) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = true
	s.changeLocked()
}

func (s *sidecar) isReleased(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.released[id]
}

func (s *sidecar) checkpoint(id string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq, _ := DecodeCheckpoint(s.tasks[id].checkpoint)
	return seq
}

// waitFor waits until cond (called without the lock held) holds.
func (s *sidecar) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		s.mu.Lock()
		ch := s.progress
		s.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (s *sidecar) checkCounts(t *testing.T, id string, want map[string]uint64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, n := range want {
		if v := s.data[id][k]; string(v) != strconv.FormatUint(n, 10) {
			t.Errorf("count of %s = %q; want %d", k, v, n)
		}
	}
}

func (s *sidecar) viewLocked() api.View {
	v := api.View{Member: "m1", Generation: s.version, Version: s.version, State: api.StateMember, Shutdown: s.down}
	for _, id := range s.order {
		t := s.tasks[id]
		if s.released[id] {
			continue
		}
		tv := api.TaskView{ID: id, Role: t.role, Stateful: !t.stateless, Epoch: t.epoch}
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

func (s *sidecar) Assignment() api.View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.viewLocked()
}

func (s *sidecar) WaitAssignment(ctx context.Context, after uint64) api.View {
	for {
		s.mu.Lock()
		v, ch := s.viewLocked(), s.changed
		s.mu.Unlock()
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

func (s *sidecar) activeLocked(id string) (*sidecarTask, error) {
	t, ok := s.tasks[id]
	if !ok || s.released[id] {
		return nil, fmt.Errorf("task %s is not on member m1: %w", id, api.ErrUnknownTask)
	}
	if t.role != api.RoleActive {
		return nil, fmt.Errorf("task %s is a %s on member m1: %w", id, t.role, api.ErrNotOwner)
	}
	return t, nil
}

func (s *sidecar) Release(_ context.Context, id string, epoch uint64) (api.ReleaseResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.activeLocked(id)
	if err != nil {
		return api.ReleaseResult{}, err
	}
	if epoch != 0 && epoch != t.epoch {
		return api.ReleaseResult{}, fmt.Errorf("task %s is at epoch %d, not %d: %w", id, t.epoch, epoch, api.ErrNotOwner)
	}
	if !t.revoked {
		return api.ReleaseResult{}, fmt.Errorf("task %s is not revoked: %w", id, api.ErrNotRevoked)
	}
	s.released[id] = true
	s.changeLocked()
	return api.ReleaseResult{Task: id, Epoch: t.epoch, Seq: t.seq}, nil
}

func (s *sidecar) Get(id string, key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.singleGets++
	if _, err := s.activeLocked(id); err != nil {
		return nil, err
	}
	v, ok := s.data[id][string(key)]
	if !ok {
		return nil, fmt.Errorf("no key %q: %w", key, api.ErrNotFound)
	}
	return v, nil
}

func (s *sidecar) GetMany(id string, keys [][]byte, _ int) ([][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batchGets++
	if _, err := s.activeLocked(id); err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if v, ok := s.data[id][string(k)]; ok {
			out[i] = bytes.Clone(v)
		}
	}
	return out, nil
}

// readTally counts the worker's reads: single gets and batch gets.
type readTally struct{ single, batches int }

func (s *sidecar) reads() readTally {
	s.mu.Lock()
	defer s.mu.Unlock()
	return readTally{single: s.singleGets, batches: s.batchGets}
}

func (s *sidecar) Scan(string, api.ScanOptions) ([]api.KV, error) {
	return nil, fmt.Errorf("the counter does not scan: %w", api.ErrInvalid)
}

func (s *sidecar) Commit(_ context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.activeLocked(id)
	if err != nil {
		return api.CommitResult{}, err
	}
	if t.stateless {
		return api.CommitResult{}, fmt.Errorf("task %s is stateless: %w", id, api.ErrInvalid)
	}
	if req.Epoch != t.epoch {
		return api.CommitResult{}, fmt.Errorf("task %s is at epoch %d, not %d: %w", id, t.epoch, req.Epoch, api.ErrNotOwner)
	}
	if s.data[id] == nil {
		s.data[id] = map[string][]byte{}
	}
	for _, kv := range req.Puts {
		s.data[id][string(kv.Key)] = bytes.Clone(kv.Value)
	}
	if len(req.Checkpoint) > 0 {
		t.checkpoint = bytes.Clone(req.Checkpoint)
	}
	t.seq++
	s.progressLocked()
	return api.CommitResult{Task: id, Seq: t.seq, Epoch: t.epoch}, nil
}

func (s *sidecar) Leave(context.Context) (api.LeaveStatus, error) {
	return api.LeaveStatus{}, fmt.Errorf("the counter does not leave: %w", api.ErrInvalid)
}
func (s *sidecar) LeaveStatus() api.LeaveStatus                 { return api.LeaveStatus{} }
func (s *sidecar) Group(context.Context) (api.GroupView, error) { return api.GroupView{}, nil }
func (s *sidecar) Ready() error                                 { return nil }

// Query implements httpapi.Backend: the fake sidecar answers no query
// (the worker makes none).
func (s *sidecar) Query(context.Context, api.Query) (api.QueryAnswer, error) {
	return api.QueryAnswer{}, fmt.Errorf("%w: the fake sidecar answers no queries", api.ErrUnavailable)
}

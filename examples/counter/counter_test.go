package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/httpapi"
)

// TestCounterCountsAcrossHandOver runs the worker against a real in-process
// JetStream server and an in-memory sidecar: it counts a task's input,
// commits counts with checkpoints, follows a revoke, resumes from the
// checkpoint when the task comes back, and exits on shutdown.
func TestCounterCountsAcrossHandOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS server")
	}
	ctx := context.Background()
	natsURL := startNATS(t)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := ensureStream(ctx, js, "INPUT_g", "g"); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{}
	publish := func(task string, n int) uint64 {
		var last uint64
		for i := range n {
			key := fmt.Sprintf("k%d", i%3)
			if task == "t1" {
				want[key]++
			}
			ack, err := js.Publish(ctx, "input.g."+task, []byte(key))
			if err != nil {
				t.Fatal(err)
			}
			last = ack.Sequence
		}
		return last
	}
	last := publish("t1", 25)
	publish("t2", 3)

	agent := newSidecar()
	agent.set("t1", httpapi.RoleActive, 1)
	agent.set("t2", httpapi.RoleLearner, 1)
	srv := httptest.NewServer(httpapi.New(agent, httpapi.Options{}).Handler())
	defer srv.Close()

	eventsPath := filepath.Join(t.TempDir(), "events.jsonl")
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- run(runCtx, []string{"--sidecar", srv.URL, "--nats", natsURL, "--group", "g",
			"--batch", "10", "--max-delay", "5ms", "--events", eventsPath, "--log-level", "warn"}, io.Discard, io.Discard)
	}()

	agent.waitFor(t, "t1 counted up to its last message", func() bool { return agent.checkpoint("t1") == last })
	agent.checkCounts(t, "t1", want)

	agent.revoke("t1")
	agent.waitFor(t, "t1 released", func() bool { return agent.isReleased("t1") })

	// The task comes back at a new epoch: the worker starts with an empty
	// cache, reads the counts from the sidecar and resumes after the checkpoint.
	agent.set("t1", httpapi.RoleActive, 2)
	last = publish("t1", 5)
	agent.waitFor(t, "t1 counted the new messages", func() bool { return agent.checkpoint("t1") == last })
	agent.checkCounts(t, "t1", want)

	agent.shutdown()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("run = %v, want nil after shutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("counter did not exit after shutdown")
	}

	checkEvents(t, eventsPath, last)
}

// checkEvents checks the event log's shape: t1 starts, commits with rising
// checkpoints, stops, is released, starts again from where it stopped, and
// the worker shuts down; t2 (a learner) never starts.
func checkEvents(t *testing.T, path string, last uint64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kinds []string
	var records, prevCheckpoint float64
	var stopCheckpoint float64 = -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event line %q: %v", sc.Text(), err)
		}
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(ev["t"])); err != nil {
			t.Errorf("event %v has no RFC 3339 time: %v", ev, err)
		}
		kind := fmt.Sprint(ev["event"])
		if ev["task"] == "t2" {
			t.Errorf("event %v for t2, a learner", ev)
		}
		switch kind {
		case "commit":
			if cp := ev["checkpoint"].(float64); cp <= prevCheckpoint {
				t.Errorf("commit checkpoint %v after %v, want rising", cp, prevCheckpoint)
			}
			prevCheckpoint = ev["checkpoint"].(float64)
			records += ev["records"].(float64)
			if len(kinds) > 0 && kinds[len(kinds)-1] == "commit" {
				continue // fold runs of commits
			}
		case "stop":
			if stopCheckpoint < 0 {
				stopCheckpoint = ev["checkpoint"].(float64)
			}
		case "start":
			if len(kinds) > 0 && ev["checkpoint"].(float64) != stopCheckpoint {
				t.Errorf("restart from checkpoint %v, want %v where it stopped", ev["checkpoint"], stopCheckpoint)
			}
		}
		kinds = append(kinds, kind)
	}
	want := []string{"start", "commit", "stop", "release", "start", "commit", "stop", "shutdown"}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v", kinds, want)
	}
	if records != 30 || uint64(prevCheckpoint) != last {
		t.Errorf("commits covered %v records up to seq %v, want 30 up to %d", records, prevCheckpoint, last)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
		stream  string
	}{
		{name: "defaults", args: nil, stream: "INPUT_demo"},
		{name: "group names the stream", args: []string{"--group", "orders"}, stream: "INPUT_orders"},
		{name: "explicit stream", args: []string{"--input-stream", "IN"}, stream: "IN"},
		{name: "dotted group", args: []string{"--group", "a.b"}, wantErr: true},
		{name: "zero batch", args: []string{"--batch", "0"}, wantErr: true},
		{name: "zero delay", args: []string{"--max-delay", "0s"}, wantErr: true},
		{name: "stray argument", args: []string{"extra"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseFlags(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			}
			if err == nil && c.inputStream != tt.stream {
				t.Errorf("parseFlags(%q) stream = %q, want %q", tt.args, c.inputStream, tt.stream)
			}
		})
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	for _, seq := range []uint64{0, 1, 1 << 40} {
		if got, err := decodeCheckpoint(encodeCheckpoint(seq)); err != nil || got != seq {
			t.Errorf("decode(encode(%d)) = %d, %v", seq, got, err)
		}
	}
	if _, err := decodeCheckpoint([]byte("abc")); err == nil {
		t.Errorf("decode of a 3-byte checkpoint = nil error, want one")
	}
}

// startNATS runs an in-process JetStream server on a random port.
func startNATS(t *testing.T) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(ns.Shutdown)
	return ns.ClientURL()
}

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
}

type sidecarTask struct {
	role       string
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
	seq, _ := decodeCheckpoint(s.tasks[id].checkpoint)
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
	for k, n := range want {
		v, err := s.Get(id, []byte(k))
		if err != nil || string(v) != strconv.FormatUint(n, 10) {
			t.Errorf("count of %s = %q, %v; want %d", k, v, err, n)
		}
	}
}

func (s *sidecar) viewLocked() httpapi.View {
	v := httpapi.View{Member: "m1", Generation: s.version, Version: s.version, State: httpapi.StateMember, Shutdown: s.down}
	for _, id := range s.order {
		t := s.tasks[id]
		if s.released[id] {
			continue
		}
		tv := httpapi.TaskView{ID: id, Role: t.role, Stateful: true, Epoch: t.epoch}
		if t.role == httpapi.RoleActive {
			tv.Checkpoint = t.checkpoint
		}
		v.Tasks = append(v.Tasks, tv)
		if t.revoked {
			v.Revoke = append(v.Revoke, id)
		}
	}
	return v
}

func (s *sidecar) Assignment() httpapi.View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.viewLocked()
}

func (s *sidecar) WaitAssignment(ctx context.Context, after uint64) httpapi.View {
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
		return nil, fmt.Errorf("task %s is not on member m1: %w", id, httpapi.ErrUnknownTask)
	}
	if t.role != httpapi.RoleActive {
		return nil, fmt.Errorf("task %s is a %s on member m1: %w", id, t.role, httpapi.ErrNotOwner)
	}
	return t, nil
}

func (s *sidecar) Release(_ context.Context, id string) (httpapi.ReleaseResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.activeLocked(id)
	if err != nil {
		return httpapi.ReleaseResult{}, err
	}
	if !t.revoked {
		return httpapi.ReleaseResult{}, fmt.Errorf("task %s is not revoked: %w", id, httpapi.ErrNotRevoked)
	}
	s.released[id] = true
	s.changeLocked()
	return httpapi.ReleaseResult{Task: id, Epoch: t.epoch, Seq: t.seq}, nil
}

func (s *sidecar) Get(id string, key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.activeLocked(id); err != nil {
		return nil, err
	}
	v, ok := s.data[id][string(key)]
	if !ok {
		return nil, fmt.Errorf("no key %q: %w", key, httpapi.ErrNotFound)
	}
	return v, nil
}

func (s *sidecar) Scan(string, httpapi.ScanOptions) ([]httpapi.KV, error) {
	return nil, fmt.Errorf("the counter does not scan: %w", httpapi.ErrInvalid)
}

func (s *sidecar) Commit(_ context.Context, id string, req httpapi.CommitRequest) (httpapi.CommitResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.activeLocked(id)
	if err != nil {
		return httpapi.CommitResult{}, err
	}
	if req.Epoch != t.epoch {
		return httpapi.CommitResult{}, fmt.Errorf("task %s is at epoch %d, not %d: %w", id, t.epoch, req.Epoch, httpapi.ErrNotOwner)
	}
	if s.data[id] == nil {
		s.data[id] = map[string][]byte{}
	}
	for _, kv := range req.Puts {
		s.data[id][string(kv.Key)] = kv.Value
	}
	if len(req.Checkpoint) > 0 {
		t.checkpoint = req.Checkpoint
	}
	t.seq++
	s.progressLocked()
	return httpapi.CommitResult{Task: id, Seq: t.seq, Epoch: t.epoch}, nil
}

func (s *sidecar) Leave(context.Context) (httpapi.LeaveStatus, error) {
	return httpapi.LeaveStatus{}, fmt.Errorf("the counter does not leave: %w", httpapi.ErrInvalid)
}
func (s *sidecar) LeaveStatus() httpapi.LeaveStatus                 { return httpapi.LeaveStatus{} }
func (s *sidecar) Group(context.Context) (httpapi.GroupView, error) { return httpapi.GroupView{}, nil }
func (s *sidecar) Ready() error                                     { return nil }

package countworker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

// TestCounterCountsAcrossHandoff runs Run against a real in-process
// JetStream server and an in-memory sidecar: it counts a task's input,
// commits counts with checkpoints, follows a revoke, resumes from the
// checkpoint when the task comes back, and exits on shutdown. It reads the
// counts it lacks with one batch get per commit, and never one key at a
// time: with its cache each key once per start, without it before every
// commit.
func TestCounterCountsAcrossHandoff(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS server")
	}
	for _, noCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoCache=%v", noCache), func(t *testing.T) { testCountsAcrossHandoff(t, noCache) })
	}
}

func testCountsAcrossHandoff(t *testing.T, noCache bool) {
	ctx := context.Background()
	js := startInput(t)
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
	last := publish("t1", 100)
	publish("t2", 3)

	agent := httpapitest.New()
	agent.Move("t1", api.RoleActive, 1)
	agent.Move("t2", api.RoleLearner, 1)
	srv := httptest.NewServer(httpapi.New(agent, httpapi.Options{}).Handler())
	defer srv.Close()

	eventsPath := filepath.Join(t.TempDir(), "events.jsonl")
	events, err := os.Create(eventsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	var mu sync.Mutex
	var got []Event
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- Run(runCtx, Options{
			Client: client.New(srv.URL), JS: js, Group: "g", Batch: 10, MaxDelay: 5 * time.Millisecond,
			Events: events, Logger: zerolog.Nop(), NoCache: noCache,
			OnEvent: func(e Event) {
				mu.Lock()
				got = append(got, e)
				mu.Unlock()
			},
		})
	}()

	waitFor(t, agent, "t1 counted up to its last message", func() bool { return checkpointOf(agent, "t1") == last })
	checkCounts(t, agent, "t1", want)

	agent.Revoke("t1")
	waitFor(t, agent, "t1 released", func() bool { return agent.Released("t1") })

	// The task comes back at a new epoch: the worker starts with an empty
	// cache, reads the counts from the sidecar and resumes after the checkpoint.
	agent.Move("t1", api.RoleActive, 2)
	last = publish("t1", 5)
	waitFor(t, agent, "t1 counted the new messages", func() bool { return checkpointOf(agent, "t1") == last })
	checkCounts(t, agent, "t1", want)

	agent.Shutdown()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("run = %v, want nil after shutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("counter did not exit after shutdown")
	}

	checkEvents(t, eventsPath, last)
	single, batches := agent.Calls("Get"), agent.Calls("GetMany")
	commits := 0
	for _, e := range got {
		if e.Kind == client.EventCommit {
			commits++
		}
	}
	switch {
	case single != 0:
		t.Errorf("the worker read %d keys one at a time; want batch gets only", single)
	case noCache && batches != commits:
		t.Errorf("without a cache the worker made %d batch gets for %d commits; want one before each", batches, commits)
	case !noCache && (batches == 0 || batches > 6):
		// The first commit after a start is made at once, with the keys
		// read by then: the others are read by the next commits.
		t.Errorf("with its cache the worker made %d batch gets for %d commits; want 1 to 6 (each of the 3 keys at most once per start of t1)", batches, commits)
	}
	mu.Lock()
	defer mu.Unlock()
	lines := countLines(t, eventsPath)
	if len(got) != lines {
		t.Errorf("OnEvent got %d events, the event log has %d lines; want the same events", len(got), lines)
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
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
	if records != 105 || uint64(prevCheckpoint) != last {
		t.Errorf("commits covered %v records up to seq %v, want 105 up to %d", records, prevCheckpoint, last)
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	for _, seq := range []uint64{0, 1, 1 << 40} {
		if got, err := DecodeCheckpoint(EncodeCheckpoint(seq)); err != nil || got != seq {
			t.Errorf("decode(encode(%d)) = %d, %v", seq, got, err)
		}
	}
	if _, err := DecodeCheckpoint([]byte("abc")); err == nil {
		t.Errorf("decode of a 3-byte checkpoint = nil error, want one")
	}
}

// startNATS runs an in-process JetStream server on a random port.
// startInput starts a NATS server and returns a JetStream context on it
// with the input stream of group g.
func startInput(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(startNATS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := EnsureStream(context.Background(), js, StreamName("g"), "g"); err != nil {
		t.Fatal(err)
	}
	return js
}

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

// TestStatelessTaskIsNeverCommitted runs a stateless task: the worker reads
// its input without committing anything, and releases it when revoked.
func TestStatelessTaskIsNeverCommitted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS server")
	}
	ctx := context.Background()
	js := startInput(t)
	agent := httpapitest.New()
	agent.Set("s1", httpapitest.Task{Role: api.RoleActive, Epoch: 1, Stateless: true})
	srv := httptest.NewServer(httpapi.New(agent, httpapi.Options{}).Handler())
	defer srv.Close()

	events := make(chan Event, 100)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- Run(runCtx, Options{Client: client.New(srv.URL), JS: js, Group: "g", MaxDelay: time.Millisecond,
			OnEvent: func(e Event) { events <- e }})
	}()
	waitEvent := func(kind client.EventType) Event {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case e := <-events:
				if e.Kind == client.EventCommit || e.Kind == client.EventRestart {
					t.Fatalf("event %+v for a stateless task, want none", e)
				}
				if e.Kind == kind {
					return e
				}
			case <-timeout:
				t.Fatalf("timed out waiting for a %s event", kind)
			}
		}
	}
	waitEvent(client.EventStart)
	for i := range 5 {
		if _, err := js.Publish(ctx, InputSubject("g", "s1"), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	agent.Revoke("s1")
	if e := waitEvent(client.EventRelease); e.Task != "s1" {
		t.Errorf("released %q, want s1", e.Task)
	}
	agent.Shutdown()
	waitEvent(client.EventShutdown)
	if err := <-ran; err != nil {
		t.Errorf("Run = %v, want nil after shutdown", err)
	}
}

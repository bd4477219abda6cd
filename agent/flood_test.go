package agent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/sidecar"
)

// slowBodies floods addr from clients connections, each sending a commit
// whose body (a megabyte, declared) never comes, and sending another on a
// new connection as soon as the agent answers (a 408 once the body timeout
// passes) or closes it, until stop. ends counts the slow bodies the agent
// answered or cut off.
type slowBodies struct {
	ends atomic.Int64
	stop context.CancelFunc
	done sync.WaitGroup
}

const slowBodyHead = "POST /tasks/p-0/commit HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"

func floodSlowBodies(addr string, clients int) *slowBodies {
	ctx, stop := context.WithCancel(context.Background())
	f := &slowBodies{stop: stop}
	for range clients {
		f.done.Go(func() {
			for ctx.Err() == nil {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err != nil {
					continue
				}
				cut := context.AfterFunc(ctx, func() { c.Close() })
				if _, err := io.WriteString(c, slowBodyHead); err == nil {
					_, _ = http.ReadResponse(bufio.NewReader(c), nil) // an answer, or the connection closed
				}
				cut()
				c.Close()
				if ctx.Err() == nil {
					f.ends.Add(1)
				}
			}
		})
	}
	return f
}

func (f *slowBodies) end() {
	f.stop()
	f.done.Wait()
}

// floodWorker is a worker (client.Run) whose tasks each commit one key
// again and again; it counts the commits acknowledged and failed, and keeps
// every event of its tasks but their starts.
type floodWorker struct {
	mu      sync.Mutex
	started map[string]uint64 // task → epoch of its last start
	events  []string          // stops, restarts, refusals, releases
	acked   map[string]int
	failed  []string
}

func (w *floodWorker) onEvent(ev client.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch ev.Type {
	case client.EventStart:
		w.started[ev.Task] = ev.Epoch
	case client.EventPrepare, client.EventDiscard, client.EventCommit:
	default:
		w.events = append(w.events, fmt.Sprintf("%s %s at epoch %d (%v)", ev.Type, ev.Task, ev.Epoch, ev.Err))
	}
}

func (w *floodWorker) task(ctx context.Context, t client.Task) error {
	for i := 1; ctx.Err() == nil; i++ {
		v := fmt.Appendf(nil, "%d", i)
		_, err := t.Commit(ctx, []api.KV{{Key: []byte("n"), Value: v}}, nil, v)
		if ctx.Err() != nil {
			return nil
		}
		w.mu.Lock()
		if err != nil {
			w.failed = append(w.failed, err.Error())
		} else {
			w.acked[t.ID]++
		}
		w.mu.Unlock()
		if errors.Is(err, api.ErrNotOwner) {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond): // a worker's next batch; paces the commits, waits for nothing
		}
	}
	return nil
}

// counts returns the commits acknowledged by task and those that failed,
// and resets them.
func (w *floodWorker) counts() (map[string]int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	acked, failed := w.acked, w.failed
	w.acked, w.failed = map[string]int{}, nil
	return acked, failed
}

// A worker keeps its tasks through a flood of slow bodies on its agent's
// API that lasts several worker timeouts: more clients than the request
// cap each send a commit whose body never comes, and send another as soon
// as the agent answers 408 (the body timeout is short) or closes the
// connection. Throughout, the worker long-polls and commits to both of its
// tasks: every commit is acknowledged, the agent never sees the worker
// detach, and after the flood both tasks are still active on the member at
// the epochs they had. (The flood's bodies used to take every request slot
// as soon as their headers were in, and the worker's commits were answered
// 503 until the flood ended.)
func TestWorkerKeepsItsTasksThroughASlowBodyFlood(t *testing.T) {
	const (
		workerTimeout = 2 * time.Second
		clients       = httpapi.DefaultMaxRequests + 44 // 300: past the request cap, below the connection cap
	)
	c := newCluster(t, testConfig("p-0..1", ""))
	var detached, lost atomic.Int64
	log := zerolog.New(io.Discard).Level(zerolog.WarnLevel) // the hook sees the warnings even when the test is quiet
	if testing.Verbose() {
		log = c.logger("m1")
	}
	log = log.Hook(zerolog.HookFunc(func(_ *zerolog.Event, _ zerolog.Level, msg string) {
		switch {
		case strings.HasPrefix(msg, "worker detached"):
			detached.Add(1)
		case strings.HasPrefix(msg, "worker lost"):
			lost.Add(1)
		}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, stop := c.startM1(ctx, sidecar.Options{
		DataDir: filepath.Join(t.TempDir(), "m1"),
		Agent: agent.Options{Group: c.group, MemberID: "m1", Config: c.cfg, Logger: log,
			RequireWorker: true, WorkerTimeout: workerTimeout},
		Listen: "127.0.0.1:0",
		API:    httpapi.Options{BodyReadTimeout: 300 * time.Millisecond},
		Logger: log,
	})
	defer stop()
	cl := m.Client()

	w := &floodWorker{started: map[string]uint64{}, acked: map[string]int{}}
	wctx, stopWorker := context.WithCancel(ctx)
	var worker sync.WaitGroup
	worker.Go(func() { _ = client.Run(wctx, cl, w.task, client.RunOptions{OnEvent: w.onEvent}) })
	defer func() { stopWorker(); worker.Wait() }()

	// Both tasks active here, the worker running each at its epoch and
	// committing.
	var epochs map[string]uint64
	poll.Eventually(t, 30*time.Second, "both tasks active on m1 and committing", func() error {
		v, err := cl.Assignment(ctx, 0, 0)
		if err != nil {
			return err
		}
		epochs = map[string]uint64{}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, tv := range v.Tasks {
			if tv.Role == api.RoleActive && w.started[tv.ID] == tv.Epoch && w.acked[tv.ID] > 0 {
				epochs[tv.ID] = tv.Epoch
			}
		}
		if len(epochs) != 2 {
			return fmt.Errorf("tasks active, started and committing at their epochs: %v", epochs)
		}
		return nil
	})
	if ws, _ := memberWorker(c, "m1"); ws != api.WorkerAttached {
		t.Fatalf("m1's worker %q before the flood, want attached", ws)
	}
	_, failedBefore := w.counts()
	if len(failedBefore) > 0 {
		t.Fatalf("commits failed before the flood: %v", failedBefore)
	}

	// The flood lasts three worker timeouts, and until each of its clients
	// has been answered or cut off twice.
	f := floodSlowBodies(m.Member.Addr.String(), clients)
	floodStart := time.Now()
	poll.Eventually(t, time.Minute, "the flood to outlast three worker timeouts and its clients to reconnect", func() error {
		if since := time.Since(floodStart); since < 3*workerTimeout {
			return fmt.Errorf("the flood has lasted %s", since.Round(time.Millisecond))
		}
		if n := f.ends.Load(); n < 2*clients {
			return fmt.Errorf("the flood's bodies were answered or cut off %d times", n)
		}
		return nil
	})
	acked, failed := w.counts()
	f.end()

	if len(failed) > 0 {
		t.Errorf("%d of the worker's commits failed during the flood (first: %s), want every one acknowledged", len(failed), failed[0])
	}
	for id := range epochs {
		if acked[id] == 0 {
			t.Errorf("no commit of %s acknowledged during the flood, want the worker to go on committing", id)
		}
	}
	if n, l := detached.Load(), lost.Load(); n > 0 || l > 0 {
		t.Errorf("the agent logged the worker detached %d times and lost %d times during the flood, want neither", n, l)
	}
	w.mu.Lock()
	events := slices.Clone(w.events)
	w.mu.Unlock()
	if len(events) > 0 {
		t.Errorf("the worker's tasks were stopped, restarted or refused during the flood: %v", events)
	}
	v, err := cl.Assignment(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tv := range v.Tasks {
		if tv.Role != api.RoleActive || tv.Epoch != epochs[tv.ID] {
			t.Errorf("after the flood %s is %s at epoch %d, want active at epoch %d", tv.ID, tv.Role, tv.Epoch, epochs[tv.ID])
		}
	}
	if len(v.Tasks) != len(epochs) {
		t.Errorf("after the flood m1 has %d tasks, want %d", len(v.Tasks), len(epochs))
	}
	if ws, _ := memberWorker(c, "m1"); ws != api.WorkerAttached {
		t.Errorf("m1's worker %q after the flood, want attached", ws)
	}
	t.Logf("during the flood (%s, its bodies answered or cut off %d times): %v commits acknowledged",
		time.Since(floodStart).Round(time.Millisecond), f.ends.Load(), acked)
}

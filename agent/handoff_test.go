package agent_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/countworker"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/record"
)

// inputKey is the key of a task's i-th input item: the test's input is a
// pure function of (task, index), so the exact final counts follow from the
// checkpoint alone.
func inputKey(task string, i uint64) string {
	return "k" + strconv.FormatUint((i*7+uint64(len(task)))%5, 10)
}

// worker is an in-process worker: it runs client.Run against one agent's
// API and counts its tasks' input, committing counts with the input
// position as checkpoint.
type worker struct {
	t      testing.TB
	id     string
	srv    *httptest.Server
	cancel context.CancelFunc
	done   chan error

	mu     sync.Mutex
	events []record.Event
	acks   []record.Acked
}

func (c *cluster) startWorker(id string) *worker {
	m := c.members[id]
	w := &worker{t: c.t, id: id, srv: httptest.NewServer(httpapi.New(m.a, httpapi.Options{}).Handler()), done: make(chan error, 1)}
	c.t.Cleanup(w.srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	cl := client.New(w.srv.URL)
	go func() {
		w.done <- client.Run(ctx, cl, w.process, client.RunOptions{OnEvent: w.onEvent, Logger: c.logger("w-" + id)})
	}()
	c.t.Cleanup(w.stop)
	return w
}

func (w *worker) stop() {
	w.cancel()
	<-w.done
	w.done <- nil // later stops return at once
}

// onEvent records ev as the one record of a run has it (internal/record),
// without its checkpoint, which the checks here do not read.
func (w *worker) onEvent(ev client.Event) {
	w.mu.Lock()
	w.events = append(w.events, record.Event{Member: w.id, Time: ev.Time, Type: ev.Type, Task: ev.Task, Epoch: ev.Epoch, Seq: ev.Seq, Code: ev.Code})
	w.mu.Unlock()
}

// process counts a task's input in batches of 10 items, about one batch
// every 2ms, until stopped.
func (w *worker) process(ctx context.Context, t client.Task) error {
	var next uint64
	if len(t.Checkpoint) == 8 {
		next = binary.BigEndian.Uint64(t.Checkpoint)
	}
	counts := map[string]uint64{}
	tick := time.NewTicker(2 * time.Millisecond) // the input's pace
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil // every batch is committed when it is made
		case <-tick.C:
		}
		batch := map[string]uint64{}
		for i := next; i < next+10; i++ {
			k := inputKey(t.ID, i)
			if _, ok := counts[k]; !ok {
				v, err := t.Get(ctx, []byte(k))
				switch {
				case errors.Is(err, client.ErrNotFound):
					counts[k] = 0
				case err != nil:
					return err
				default:
					n, _ := strconv.ParseUint(string(v), 10, 64)
					counts[k] = n
				}
			}
			counts[k]++
			batch[k] = counts[k]
		}
		var puts []api.KV
		for k, v := range batch {
			puts = append(puts, api.KV{Key: []byte(k), Value: []byte(strconv.FormatUint(v, 10))})
		}
		res, err := t.Commit(ctx, puts, nil, binary.BigEndian.AppendUint64(nil, next+10))
		if err != nil {
			return err
		}
		next += 10
		w.mu.Lock()
		w.acks = append(w.acks, record.Acked{Task: t.ID, Seq: res.Seq, Epoch: res.Epoch})
		w.mu.Unlock()
	}
}

// running checks that the worker has started every task gv gives its
// member, at the task's current epoch.
func (w *worker) running(gv api.GroupView) error {
	events, _ := w.snapshot()
	for _, t := range gv.Tasks {
		if t.Active != w.id {
			continue
		}
		started := false
		for _, ev := range events {
			if ev.Type == client.EventStart && ev.Task == t.ID && ev.Epoch == t.Epoch {
				started = true
			}
		}
		if !started {
			return fmt.Errorf("worker %s has not started %s at epoch %d", w.id, t.ID, t.Epoch)
		}
	}
	return nil
}

func (w *worker) snapshot() ([]record.Event, []record.Acked) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]record.Event(nil), w.events...), append([]record.Acked(nil), w.acks...)
}

// TestPlannedHandoffUnderLoad moves tasks to a new member and back while
// workers commit continuously, and checks from the changelog that nothing
// acknowledged was lost, no stale owner wrote, and the counts are exact.
func TestPlannedHandoffUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-agent hand-off under load")
	}
	cfg := testConfig("orders-0..3", "")
	cfg.ReleaseTimeout = cfgDuration(30 * time.Second) // every move must be a real release
	c := newCluster(t, cfg)
	reg := prometheus.NewRegistry()
	c.registry = map[string]*prometheus.Registry{"m1": prometheus.NewRegistry(), "m2": reg}
	c.start("m1")
	w1 := c.startWorker("m1")
	poll.Eventually(t, 20*time.Second, "m1 owning everything and committing", func() error {
		_, acks := w1.snapshot()
		if len(acks) < 40 {
			return fmt.Errorf("%d commits so far", len(acks))
		}
		return balanced(c.view(), "m1")
	})

	// Scale up: half the tasks move to m2 through learners.
	c.start("m2")
	w2 := c.startWorker("m2")
	poll.Eventually(t, 30*time.Second, "tasks moved to m2", func() error {
		gv := c.view()
		if err := balanced(gv, "m1", "m2"); err != nil {
			return err
		}
		return c.activeEverywhere(gv)
	})
	poll.Eventually(t, 10*time.Second, "m2 committing", func() error {
		if _, acks := w2.snapshot(); len(acks) < 20 {
			return fmt.Errorf("%d commits on m2", len(acks))
		}
		return nil
	})

	// Leave: m2 hands everything back and is told to shut down.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.members["m2"].a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.members["m2"].a.WaitDone(ctx); err != nil {
		t.Fatalf("m2 not done after leave: %v", err)
	}
	select {
	case err := <-w2.done:
		if err != nil {
			t.Fatalf("worker 2: %v", err)
		}
		w2.done <- nil
	case <-ctx.Done():
		t.Fatal("worker 2 did not exit after shutdown")
	}
	poll.Eventually(t, 20*time.Second, "everything back on m1 and running in its worker", func() error {
		gv := c.view()
		if err := balanced(gv, "m1"); err != nil {
			return err
		}
		return w1.running(gv)
	})
	w1.stop()

	ev1, acks1 := w1.snapshot()
	ev2, acks2 := w2.snapshot()
	acks := append(acks1, acks2...)
	events := append(ev1, ev2...)
	checkChangelog(t, c, []string{"orders-0", "orders-1", "orders-2", "orders-3"}, acks, events)

	// Every planned move recorded its pause: the worker-side pause (the old
	// owner's stop to the next owner's start) and the agent's histogram.
	pauses := movePauses(events)
	if len(pauses) < 4 {
		t.Errorf("recorded %d hand-off pauses, want at least 4 (2 moves out, 2 back)", len(pauses))
		for _, ev := range events {
			if ev.Type != client.EventStart && ev.Type != client.EventRelease && ev.Type != client.EventStop {
				continue
			}
			t.Logf("event %s %s %s epoch %d seq %d", ev.Time.Format("15:04:05.000000"), ev.Type, ev.Task, ev.Epoch, ev.Seq)
		}
	}
	for _, p := range pauses {
		t.Logf("hand-off pause %s", p)
	}
	if n := histogramCount(t, reg, "handoff_handoff_pause_seconds"); n < 2 {
		t.Errorf("m2 recorded %d hand-off pauses in its histogram, want at least 2", n)
	}
	// Planned moves found their learners current: no activation on m2
	// replayed anything itself (invariant 3, no pause for a restore).
	if v := counterValue(t, reg, "handoff_activation_replayed_messages_total"); v != 0 {
		t.Errorf("m2's activations replayed %v messages, want 0 for planned moves", v)
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var v float64
			for _, m := range mf.GetMetric() { // a counter's series, or a gauge's
				v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
			return v
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// checkChangelog checks each task's changelog with the one final check
// (record.CheckTask: one chain of owners, no acknowledged commit lost or
// acknowledged to a stale owner, the counts of the input up to the
// checkpoint), and that after a release at (epoch, seq) the old owner's
// epoch never writes again.
func checkChangelog(t *testing.T, c *cluster, tasks []string, acks []record.Acked, events []record.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	markers, releases := 0, 0
	byTask := map[string][]record.Acked{}
	for _, a := range acks {
		byTask[a.Task] = append(byTask[a.Task], a)
	}
	for _, task := range tasks {
		recs, err := changelog.ReadTask(ctx, c.js, c.group, task)
		if err != nil {
			t.Fatal(err)
		}
		// The test's input is a pure function of the index: the input up to
		// the checkpoint is the input.
		n, err := countworker.DecodeCheckpoint(changelog.Replay(recs).Checkpoint)
		if err != nil || n == 0 {
			t.Errorf("%s: no checkpoint after replay (%v)", task, err)
			continue
		}
		want := map[string]uint64{}
		for i := uint64(0); i < n; i++ {
			want[inputKey(task, i)]++
		}
		tc := record.CheckTask(task, recs, byTask[task], record.Want{Counts: want, End: n, HistoryKeys: 0})
		for _, p := range tc.Problems() {
			t.Errorf("%s: %s", task, p)
		}
		for _, ev := range events {
			if ev.Type != client.EventRelease || ev.Task != task {
				continue
			}
			for _, r := range recs {
				if r.Seq > ev.Seq && r.Entry.Epoch == ev.Epoch && r.Entry.Kind == changelog.KindCommit {
					t.Errorf("%s: commit at seq %d from epoch %d after its release at seq %d", task, r.Seq, ev.Epoch, ev.Seq)
				}
			}
		}
		markers += tc.Markers
		releases += tc.Releases
	}
	// Each task was activated once, with its epoch marker, and every
	// planned move handed it over directly, with a release entry.
	if moves := len(movePauses(events)); markers != len(tasks) || releases != moves {
		t.Errorf("%d epoch markers and %d release entries, want %d and %d (a marker per task's first activation, a release entry per planned move)",
			markers, releases, len(tasks), moves)
	}
}

// movePauses returns the pauses of the moves in events, paired by the one
// rule (record.Pauses): from the old owner's worker stopping the task to
// the next owner's worker starting it.
func movePauses(events []record.Event) []time.Duration {
	var out []time.Duration
	for _, p := range record.Pauses(events, time.Now()) {
		if p.Moved() {
			out = append(out, p.Duration)
		}
	}
	return out
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var n uint64
			for _, m := range mf.GetMetric() {
				n += histogram(m).GetSampleCount()
			}
			return n
		}
	}
	return 0
}

func histogram(m *dto.Metric) *dto.Histogram { return m.GetHistogram() }

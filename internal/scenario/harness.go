package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/cluster"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/record"
)

// Harness runs one scenario: NATS, the members, the input generator, and
// the observers. Create it with New; everything it started is killed when
// the test ends.
type Harness struct {
	t     testing.TB
	opts  Options
	bins  Binaries
	start time.Time

	// Dir holds every process's directory and log.
	Dir  string
	NATS []*NATSServer
	Gen  *record.Generator

	stateful []string
	procs    *cluster.ProcessConfig // how every member runs
	members  map[string]*Member
	order    []string
	nc       *nats.Conn
	js       jetstream.JetStream
	group    *cluster.Group
	progress *progressLog
}

// New builds the binaries (once per test binary), starts NATS, creates the
// input stream, connects the harness's observers and registers the cleanup
// that kills every process and, if the test failed, logs the tails of the
// logs. Set HANDOFF_SCENARIO_KEEP=1 to keep the directory afterwards.
func New(t testing.TB, o Options) *Harness {
	t.Helper()
	o = o.withDefaults()
	bins, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	h := &Harness{t: t, opts: o, bins: bins, start: time.Now(), members: map[string]*Member{}}
	if h.stateful, err = expand(o.Stateful); err != nil {
		t.Fatal(err)
	}
	if _, err = expand(o.Stateless); err != nil { // the agents' config lists them
		t.Fatal(err)
	}
	if os.Getenv("HANDOFF_SCENARIO_KEEP") != "" {
		if h.Dir, err = os.MkdirTemp("", "handoff-scenario-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("keeping the scenario's files in %s", h.Dir)
	} else {
		h.Dir = t.TempDir()
	}
	t.Cleanup(h.cleanup)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if h.NATS, err = cluster.StartNATS(ctx, bins.NATSServer, filepath.Join(h.Dir, "nats"), o.NATSNodes); err != nil {
		t.Fatal(err)
	}
	h.procs = processConfig(o, bins, h.NATSURL())
	h.nc, err = nats.Connect(h.NATSURL(), nats.Name("scenario-harness"), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	if h.js, err = jetstream.New(h.nc); err != nil {
		t.Fatal(err)
	}
	h.group = &cluster.Group{JS: h.js, Name: o.Group}
	if err := h.createInput(ctx); err != nil {
		t.Fatal(err)
	}
	if h.progress, err = watchProgress(h.nc, o.Group); err != nil {
		t.Fatal(err)
	}
	h.Gen = record.NewGenerator(h.js, record.GeneratorOptions{Group: o.Group, Tasks: h.stateful, Keys: o.Keys, Seed: 1})
	h.Logf("NATS up (%d node(s), replicas %d); group %s: stateful %s, stateless %s, %s hand-off",
		o.NATSNodes, o.Replicas, o.Group, o.Stateful, o.Stateless, o.Handover)
	return h
}

func expand(spec string) ([]string, error) {
	if spec == "" {
		return nil, nil
	}
	ids, err := assign.ExpandSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("task spec %q: %w", spec, err)
	}
	return ids, nil
}

// createInput creates the input stream the counter reads (the counter
// would create it too, but the generator may publish first). Its duplicate
// window makes the generator's retries idempotent.
func (h *Harness) createInput(ctx context.Context) error {
	err := poll.Within(30*time.Second, pollInterval, func() error {
		_, err := h.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:       "INPUT_" + h.opts.Group,
			Subjects:   []string{"input." + h.opts.Group + ".>"},
			Storage:    jetstream.FileStorage,
			Replicas:   h.opts.Replicas,
			Duplicates: 2 * time.Minute,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("create the input stream: %w", err)
	}
	return nil
}

// Logf logs with the time since the scenario started.
func (h *Harness) Logf(format string, args ...any) {
	h.t.Helper()
	h.t.Logf("[%6.2fs] %s", time.Since(h.start).Seconds(), fmt.Sprintf(format, args...))
}

// NATSURL is the comma-separated client URLs of every NATS node.
func (h *Harness) NATSURL() string {
	urls := make([]string, len(h.NATS))
	for i, n := range h.NATS {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// Stateful lists the group's stateful tasks.
func (h *Harness) Stateful() []string { return h.stateful }

// AddMember starts a new member (agent and worker) with id.
func (h *Harness) AddMember(id string) *Member {
	h.t.Helper()
	m := h.AddAgent(id)
	h.StartWorker(m)
	return m
}

// AddAgent starts a new member's agent only; StartWorker starts its worker.
func (h *Harness) AddAgent(id string) *Member {
	h.t.Helper()
	if _, ok := h.members[id]; ok {
		h.t.Fatalf("member %s exists; restart it with Restart", id)
	}
	m, err := h.newMember(id)
	if err != nil {
		h.t.Fatal(err)
	}
	h.members[id] = m
	h.order = append(h.order, id)
	if err := m.StartAgent(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.Logf("agent of %s started (pid %d, API on %s)", id, m.Agent.Pid(), m.Addr())
	return m
}

// StartWorker starts the worker of a member whose agent runs.
func (h *Harness) StartWorker(m *Member) {
	h.t.Helper()
	if err := m.StartWorker(); err != nil {
		h.t.Fatal(err)
	}
	h.Logf("worker of %s started (pid %d)", m.ID, m.Worker.Pid())
}

// Restart starts a member again, keeping its data directory.
func (h *Harness) Restart(m *Member) {
	h.t.Helper()
	if m.Running() {
		h.t.Fatalf("restart %s: still running", m.ID)
	}
	if err := m.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.Logf("member %s restarted (agent pid %d on %s, worker pid %d)", m.ID, m.Agent.Pid(), m.Addr(), m.Worker.Pid())
}

// Member returns member id.
func (h *Harness) Member(id string) *Member {
	h.t.Helper()
	m, ok := h.members[id]
	if !ok {
		h.t.Fatalf("no member %s", id)
	}
	return m
}

// Members returns every member ever added, in order.
func (h *Harness) Members() []*Member {
	out := make([]*Member, len(h.order))
	for i, id := range h.order {
		out[i] = h.members[id]
	}
	return out
}

// Group reads the group's view from its KV bucket, as `handoff status`
// does, without going through any agent.
func (h *Harness) Group() (api.GroupView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return h.group.Read(ctx)
}

// WaitJetStream waits until JetStream answers for the group's streams (the
// input, the changelog, the KV bucket): after a NATS node is lost, until a
// new meta leader and stream leaders are elected.
func (h *Harness) WaitJetStream(timeout time.Duration) {
	h.t.Helper()
	h.Eventually("JetStream answering", timeout, func() error {
		for _, name := range []string{"INPUT_" + h.opts.Group, changelog.StreamName(h.opts.Group), "KV_" + group.BucketName(h.opts.Group)} {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s, err := h.js.Stream(ctx, name)
			if err == nil {
				_, err = s.Info(ctx)
			}
			cancel()
			if err != nil {
				return fmt.Errorf("stream %s: %w", name, err)
			}
		}
		return nil
	})
}

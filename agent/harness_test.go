package agent_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/internal/invariants"
	"github.com/handoffhq/handoff/internal/natstest"
	"github.com/handoffhq/handoff/internal/sidecar"
	"github.com/handoffhq/handoff/statestore"
)

// cluster is a group of in-process agents on one real JetStream server.
type cluster struct {
	t       testing.TB
	srv     *natstest.Server
	group   string
	cfg     assign.Config
	members map[string]*member
	kv      jetstream.KeyValue
	js      jetstream.JetStream
	// registry, if set, gives members their metrics registries.
	registry map[string]*prometheus.Registry
	// storeOptions and agentOptions, if set, adjust a member's options.
	storeOptions func(id string) statestore.Options
	agentOptions func(id string, o *agent.Options)
}

// member is one running agent with its own NATS connection and store.
type member struct {
	id     string
	dir    string
	nc     *nats.Conn
	store  *statestore.Store
	a      *agent.Agent
	sc     *sidecar.Member
	cancel context.CancelFunc
	done   chan error
}

func testConfig(stateful, stateless string) assign.Config {
	cfg := assign.DefaultConfig()
	if stateful != "" {
		cfg.Stateful = []string{stateful}
	}
	if stateless != "" {
		cfg.Stateless = []string{stateless}
	}
	cfg.SessionTimeout = assign.Duration(2 * time.Second)
	cfg.ReleaseTimeout = assign.Duration(2 * time.Second)
	cfg.MaxLearnersPerMember = 0
	cfg.AcceptableLag = 10
	return cfg
}

func newCluster(t testing.TB, cfg assign.Config) *cluster {
	srv := natstest.Start(t)
	c := &cluster{t: t, srv: srv, group: "g", cfg: cfg, members: map[string]*member{}}
	c.js = srv.JetStream(t)
	t.Cleanup(c.stopAll)
	return c
}

func (c *cluster) logger(id string) zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(c.t)).Level(zerolog.InfoLevel).With().Str("m", id).Logger()
	}
	return zerolog.Nop()
}

// start starts (or restarts, keeping its data dir) member id.
func (c *cluster) start(id string) *member {
	c.t.Helper()
	m := c.members[id]
	if m == nil {
		m = &member{id: id, dir: filepath.Join(c.t.TempDir(), id)}
		c.members[id] = m
	}
	return c.run(m, agent.SnapshotOptions{})
}

// run opens and runs member m, wired as every member is (sidecar), without
// a worker API: the tests that need one serve it themselves.
func (c *cluster) run(m *member, snaps agent.SnapshotOptions) *member {
	c.t.Helper()
	var err error
	m.nc, err = nats.Connect(c.srv.URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		c.t.Fatalf("connect %s: %v", m.id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var reg prometheus.Registerer
	if r := c.registry[m.id]; r != nil {
		reg = r
	}
	aopts := agent.Options{
		Group: c.group, MemberID: m.id, Config: c.cfg, Logger: c.logger(m.id), Registerer: reg, Snapshots: snaps,
	}
	if c.agentOptions != nil {
		c.agentOptions(m.id, &aopts)
	}
	var sopts statestore.Options
	if c.storeOptions != nil {
		sopts = c.storeOptions(m.id)
	}
	m.sc, err = sidecar.Open(ctx, m.nc, sidecar.Options{DataDir: m.dir, Store: sopts, Agent: aopts, Logger: c.logger(m.id)})
	if err != nil {
		c.t.Fatalf("open member %s: %v", m.id, err)
	}
	m.a, m.store = m.sc.Agent, m.sc.Store
	if c.kv == nil {
		if c.kv, err = c.js.KeyValue(ctx, group.BucketName(c.group)); err != nil {
			c.t.Fatalf("open bucket: %v", err)
		}
	}
	runCtx, runCancel := context.WithCancel(context.Background())
	m.cancel = runCancel
	m.done = make(chan error, 1)
	go func() { m.done <- m.sc.Run(runCtx, nil) }()
	return m
}

// stop stops a member gracefully: its record is deleted and its lease
// released, as a clean exit does.
func (c *cluster) stop(id string) {
	c.t.Helper()
	m := c.members[id]
	if m == nil || m.a == nil {
		return
	}
	m.cancel()
	if err := <-m.done; err != nil {
		c.t.Errorf("member %s Run: %v", id, err)
	}
	if err := m.sc.Close(); err != nil {
		c.t.Errorf("member %s Close: %v", id, err)
	}
	m.nc.Close()
	m.a = nil
}

// crash stops a member the way kill -9 does as far as the group can tell:
// its connection drops first, so its record and lease stay until they
// expire.
func (c *cluster) crash(id string) {
	c.t.Helper()
	m := c.members[id]
	m.nc.Close()
	m.cancel()
	<-m.done
	_ = m.sc.Crash()
	m.a = nil
}

func (c *cluster) stopAll() {
	ids := make([]string, 0, len(c.members))
	for id := range c.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		c.stop(id)
	}
}

// view reads the group from NATS.
func (c *cluster) view() api.GroupView {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gv, err := group.ReadGroup(ctx, c.kv, c.group, nil)
	if err != nil {
		c.t.Fatalf("read group: %v", err)
	}
	return gv
}

// balanced checks that every task is active on one of members, each
// member's ready count is within one of the others', stateful and stateless
// separately, and nothing is in flight.
func balanced(gv api.GroupView, members ...string) error {
	return invariants.Balanced(gv, members...)
}

// activeEverywhere checks that each member's own view agrees with gv: every
// task gv places on a member is active and ready in that member's view.
func (c *cluster) activeEverywhere(gv api.GroupView) error {
	for _, t := range gv.Tasks {
		m := c.members[t.Active]
		if m == nil || m.a == nil {
			return fmt.Errorf("task %s on unknown member %q", t.ID, t.Active)
		}
		found := false
		for _, tv := range m.a.Assignment().Tasks {
			if tv.ID == t.ID && tv.Role == api.RoleActive {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("task %s not yet active in %s's view", t.ID, t.Active)
		}
	}
	return nil
}

var errNoLeader = errors.New("no leader")

// leader returns the member holding the lease.
func (c *cluster) leader() (string, error) {
	gv := c.view()
	if gv.Leader == "" {
		return "", errNoLeader
	}
	return gv.Leader, nil
}

func cfgDuration(d time.Duration) assign.Duration { return assign.Duration(d) }

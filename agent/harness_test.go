package agent_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
	harness "github.com/handoffhq/handoff/internal/cluster"
	"github.com/handoffhq/handoff/internal/natstest"
	"github.com/handoffhq/handoff/internal/record"
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
	kv      jetstream.KeyValue // the group's bucket, once a member has created it
	js      jetstream.JetStream
	grp     *harness.Group
	// registry, if set, gives members their metrics registries.
	registry map[string]*prometheus.Registry
	// storeOptions and agentOptions, if set, adjust a member's options.
	storeOptions func(id string) statestore.Options
	agentOptions func(id string, o *agent.Options)
}

// startM1 opens and starts member m1 of c with opts (its own agent and
// API, as a test that needs them sets them up), points c.kv at the group's
// bucket, and returns the member and its stop, for the caller to defer.
func (c *cluster) startM1(ctx context.Context, opts sidecar.Options) (*harness.Local, func()) {
	t := c.t
	t.Helper()
	m, err := harness.OpenLocal(ctx, harness.LocalOptions{NATSURL: c.srv.URL, Sidecar: opts})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() {
		if err := m.Stop(stopWait); err != nil {
			t.Errorf("stop m1: %v", err)
		}
	}
	if c.kv, err = c.grp.Bucket(ctx); err != nil {
		stop()
		t.Fatal(err)
	}
	return m, stop
}

// member is one agent of the cluster, in this process (harness.Local), with
// a data dir that survives its restarts; a, store and sc are its current
// run's, nil once it is stopped.
type member struct {
	id    string
	dir   string
	local *harness.Local
	store *statestore.Store
	a     *agent.Agent
	sc    *sidecar.Member
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
	c.grp = &harness.Group{JS: c.js, Name: c.group}
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
	local, err := harness.OpenLocal(ctx, harness.LocalOptions{
		NATSURL: c.srv.URL,
		Sidecar: sidecar.Options{DataDir: m.dir, Store: sopts, Agent: aopts, Logger: c.logger(m.id)},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	if err := local.Start(); err != nil {
		local.Abort()
		c.t.Fatal(err)
	}
	m.local, m.sc = local, local.Member
	m.a, m.store = m.sc.Agent, m.sc.Store
	if c.kv == nil {
		if c.kv, err = c.grp.Bucket(ctx); err != nil {
			c.t.Fatal(err)
		}
	}
	return m
}

// stopWait bounds each wait of a member's stop or crash.
const stopWait = 30 * time.Second

// stop stops a member gracefully: its record is deleted and its lease
// released, as a clean exit does.
func (c *cluster) stop(id string) {
	c.t.Helper()
	m := c.members[id]
	if m == nil || m.a == nil {
		return
	}
	if err := m.local.Stop(stopWait); err != nil {
		c.t.Errorf("stop member %s: %v", id, err)
	}
	m.a = nil
}

// crash stops a member the way kill -9 does as far as the group can tell:
// its connection drops first, so its record and lease stay until they
// expire.
func (c *cluster) crash(id string) {
	c.t.Helper()
	m := c.members[id]
	if err := m.local.Halt(false, stopWait); err != nil {
		c.t.Errorf("crash member %s: %v", id, err)
	}
	_ = m.local.Close(false)
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
	gv, err := c.grp.Read(ctx)
	if err != nil {
		c.t.Fatalf("read group: %v", err)
	}
	return gv
}

// balanced checks that every task is active on one of members, each
// member's ready count is within one of the others', stateful and stateless
// separately, and nothing is in flight.
func balanced(gv api.GroupView, members ...string) error {
	return record.Balanced(gv, members...)
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

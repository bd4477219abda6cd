// Package agent is the sidecar's core: membership with heartbeats, leader
// election on a KV lease, the leader's loop that plans and publishes
// generations with the pure assignor (agent/assign), and the member's loop
// that applies its part of each generation: it runs restores for learners
// and standbys, activates tasks it is given, asks its worker to release
// revoked tasks, and serves the worker's commits through the fenced
// changelog. A revoked task is handed over directly: the old owner's agent
// appends a release entry that names the successor, and the successor's
// tailer takes the task over from it with no leader on the path
// (handoff.go); the leader records the takeover afterwards. Each task's
// runtime moves through one lifecycle, written only by Agent.apply
// (lifecycle.go). Agent implements httpapi.Backend and
// httpapi.WorkerObserver without importing httpapi: both speak api's
// vocabulary, and internal/sidecar, which wires them, asserts it.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/statestore"
)

// Log field names.
const (
	fTask       = "task"
	fMember     = "member"
	fEpoch      = "epoch"
	fSeq        = "seq"
	fGeneration = "generation"
	fRevision   = "revision"
	fWorker     = "worker"
	fHolder     = "holder"
	fHost       = "host"
	// Stamps of a hand-off's steps, on the line logged once the step's
	// work is done (logging it first would delay the work by a write): see
	// stamp.
	fReceived = "received" // "task released": the release request arrived; "task taken over": the tailer received the release entry
	fSeen     = "seen"     // "release seen", "generation applied": the watch delivered it
	fFenced   = "fenced"   // "task active": the epoch marker was appended and applied
	fRead     = "read"     // "generation applied": how long reading the member's assignment took
	fAppended = "appended" // "task released": the release entry was appended
	fStored   = "stored"   // "task taken over": the server stored the release entry (a stateless task: its owner released it)
	fDirect   = "direct"   // "task released": the release hands the task over directly
	fWhy      = "why"      // "task released": why it goes through the leader
)

// Messages of the log lines of a hand-off's steps that the bench reads.
const (
	logTaskReleased  = "task released"
	logTaskTakenOver = "task taken over"
)

// Options configure an Agent.
type Options struct {
	Group    string
	MemberID string
	// Addr is the worker API's address, advertised in the member record.
	Addr     string
	Zone     string
	Capacity int
	// Config is this member's idea of the group config: it creates the
	// group if it has none, and must agree with the stored config in the
	// fields named by ConfigFields (json names; nil means every field).
	Config       assign.Config
	ConfigFields []string
	// Replicas of the changelog stream and KV bucket (3 on a cluster).
	Replicas int
	Logger   zerolog.Logger
	// Registerer receives the agent's metrics; nil means none.
	Registerer prometheus.Registerer
	// Snapshots configure the snapshots this member takes of the tasks it
	// owns (snapshotter.go); the zero value takes them with the defaults.
	Snapshots SnapshotOptions
	// RequireWorker makes the member own active tasks only while its
	// worker is attached, as the worker API reports it (WorkerAttached,
	// WorkerDetached), and release them on the worker's behalf once it
	// has been detached for WorkerTimeout (0 means DefaultWorkerTimeout);
	// see worker.go. Without it the member record says nothing of a
	// worker, and the member may own tasks as soon as it joins.
	RequireWorker bool
	WorkerTimeout time.Duration
	// Owner names the local state this agent runs on (the CLI keeps it in
	// the data dir). The member ID is exclusive: Open refuses it while an
	// agent with another Owner holds it alive, and an agent restarted with
	// the same Owner takes its record over at once. Empty means a fresh
	// owner at every Open.
	Owner string
	// AcceptStateLoss names tasks this member activates empty even when
	// the group's records show a history that is nowhere to be found
	// (restore.ErrLost): the operator accepts that their state is lost.
	AcceptStateLoss []string
	// RecordCacheBytes bounds the record caches of the member's active
	// tasks, all together (cache.go): 0 means DefaultRecordCacheBytes, a
	// negative value turns them off.
	RecordCacheBytes int64
}

// Agent is one member's sidecar. Open it, Run it, Close it. It holds what
// every member has; a leader's state lives in a leader (leader.go) while the
// member leads. The locks, what each guards and their order are listed in
// one place, docs/ARCHITECTURE.md ("Locks"): task.commitMu, then a.mu,
// then task.mu.
type Agent struct {
	opts Options
	log  zerolog.Logger
	nc   *nats.Conn
	js   jetstream.JetStream
	kv   jetstream.KeyValue
	clog *changelog.Log
	// replays carries the restores that catch up, tails those of caught-up
	// learners and standbys (replayconn.go).
	replays, tails *replayConn
	// learnerLimit bounds the learners' and standbys' catch-ups that work
	// at once, to half the cores: the member's tailers, commits and API
	// keep a core (restore.Limiter). Activations are not bounded.
	learnerLimit *restore.Limiter
	incoming     *incoming // holds the learners' slots while a task is handed over here (incoming.go)
	snaps        *snapshotter
	store        *statestore.Store
	metrics      *metrics
	caches       *recordCaches
	progress     *progressBook
	// progressSub is the subscription to the group's progress, held only
	// while this member needs it (progress.go); progressKick makes the
	// progress loop look now; groupAsked is when Group was last called
	// (UnixNano).
	progressSub subscription
	// successorSubs hear the successors of this member's direct revokes
	// while it does not hear the whole group (progress.go).
	successorSubs subscriptions
	progressKick  chan struct{}
	groupAsked    atomic.Int64
	incarnation   string
	started       time.Time
	owner         string
	host          string
	// claim holds the member ID: every write of the member record goes
	// through it (heartbeat.go).
	claim *group.MemberClaim

	conf atomic.Pointer[groupConfig] // the group config in force

	// committed holds the tasks whose committed record is known to exist
	// (history.go); lock-free.
	committed sync.Map

	// mu guards the member's runtime state below.
	mu           sync.Mutex
	tasks        map[string]*task
	generation   uint64
	assigned     group.MemberAssignment // this member's part of the generation applied
	assignedRev  uint64
	included     bool // some generation has included this member
	leavingSince *time.Time
	version      uint64
	changed      chan struct{} // closed and replaced on every view change

	rewatch *broadcast // fires when the connection to NATS comes back

	// candidate says whether the last generation asks this member to watch
	// the lease (group.GenerationRecord.Candidates); candidacy fires when
	// that changes (election.go).
	candidate atomic.Bool
	candidacy *broadcast

	// refreshed is when the member record was last refreshed (UnixNano;
	// see sessionLive).
	refreshed atomic.Int64
	// lastRevoke is when this member last applied a new revoke (UnixNano;
	// releasewait.go).
	lastRevoke atomic.Int64

	// leader is this member's leader state while it leads, nil otherwise.
	leader atomic.Pointer[leader]
	hbKick chan struct{}
	// worker is what the agent knows of its worker (guarded by mu).
	worker workerWatch

	// queries answers and routes the queries of tasks' state (query.go).
	queries *queries

	// afterReleaseAppend, if set (by tests only, export_test.go), runs
	// between a release entry's append and the release's record.
	afterReleaseAppend func()
	// afterPublishWrite, if set (by tests only, at any time), runs after
	// each write of a generation's publication (group.Publisher.AfterWrite).
	afterPublishWrite atomic.Pointer[func(key string)]

	// bg owns the per-task goroutines (restores, activations).
	bg     sync.WaitGroup
	bgCtx  context.Context
	bgStop context.CancelFunc
}

// Open joins the group's NATS resources (creating the changelog stream, the
// KV bucket and the group config if they are missing) and checks this
// member's config against the group's. It does not start anything.
func Open(ctx context.Context, nc *nats.Conn, store *statestore.Store, opts Options) (*Agent, error) {
	if !changelog.ValidGroup(opts.Group) {
		return nil, fmt.Errorf("group name %q: use 1 to 64 letters, digits, '-' or '_'", opts.Group)
	}
	if !group.ValidMemberID(opts.MemberID) {
		return nil, fmt.Errorf("member ID %q: use 1 to 128 letters, digits, '-' or '_' (set --member-id)", opts.MemberID)
	}
	if opts.Capacity < 1 {
		opts.Capacity = 1
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	var (
		kv    jetstream.KeyValue
		cfg   assign.Config
		clog  *changelog.Log
		snaps *snapshotter
	)
	err = settle(ctx, func(ctx context.Context) (err error) {
		kv, err = group.OpenBucket(ctx, js, opts.Group, opts.Replicas)
		return err
	})
	if err != nil {
		return nil, err
	}
	err = settle(ctx, func(ctx context.Context) (err error) {
		cfg, err = group.EnsureConfig(ctx, kv, opts.Group, opts.Config, opts.ConfigFields)
		return err
	})
	if err != nil {
		return nil, err
	}
	err = settle(ctx, func(ctx context.Context) (err error) {
		clog, err = changelog.Open(ctx, js, changelog.Options{Group: opts.Group, Replicas: opts.Replicas})
		return err
	})
	if err != nil {
		return nil, err
	}
	err = settle(ctx, func(ctx context.Context) (err error) {
		snaps, err = openSnapshots(ctx, js, opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	log := opts.Logger.With().Str(fMember, opts.MemberID).Logger()
	replays, err := openReplayConn(ctx, nc, "replays", opts, log)
	if err != nil {
		return nil, err
	}
	tails, err := openReplayConn(ctx, nc, "tails", opts, log)
	if err != nil {
		replays.close()
		return nil, err
	}
	learnerLimit := restore.NewLimiter(runtime.GOMAXPROCS(0) / 2)
	a := &Agent{
		opts:         opts,
		log:          log,
		nc:           nc,
		js:           js,
		kv:           kv,
		clog:         clog,
		replays:      replays,
		tails:        tails,
		learnerLimit: learnerLimit,
		incoming:     newIncoming(learnerLimit, log),
		snaps:        snaps,
		store:        store,
		metrics:      newMetrics(opts.Registerer),
		incarnation:  newIncarnation(),
		started:      time.Now(),
		owner:        opts.Owner,
		host:         hostname(),
		tasks:        map[string]*task{},
		changed:      make(chan struct{}),
		hbKick:       make(chan struct{}, 1),
		progressKick: make(chan struct{}, 1),
	}
	// Before the first subscription: the query subscriptions of the tasks
	// listed below answer from the moment they are made.
	a.bgCtx, a.bgStop = context.WithCancel(context.Background())
	if a.queries, err = newQueries(a); err != nil {
		a.closeOpened()
		return nil, err
	}
	a.caches = newRecordCaches(recordCacheBytes(opts.RecordCacheBytes), a.metrics)
	a.worker = newWorkerWatch(opts.RequireWorker, a.started)
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(newMemberCollector(a))
	}
	if opts.RequireWorker {
		a.metrics.setWorkerState(assign.WorkerDetached)
	}
	a.rewatch = newBroadcast()
	a.candidacy = newBroadcast()
	a.candidate.Store(true)
	if info, ok := store.Rebuilt(); ok {
		a.metrics.storeRebuilds.Inc()
		a.log.Warn().Str("movedTo", info.MovedTo).Msg("the local store was rebuilt empty: every task this member gets is restored from its snapshot and the changelog")
	}
	a.progress = newProgressBook(a.onReport)
	if err := a.setConfig(cfg); err != nil {
		a.closeOpened()
		return nil, err
	}
	metas, err := store.Tasks()
	if err != nil {
		a.closeOpened()
		return nil, fmt.Errorf("list local tasks: %w", err)
	}
	for _, m := range metas {
		a.taskLocked(m.Task).applied.Store(m.Applied) // gone, with its local copy's position
	}
	if a.owner == "" {
		a.owner = newIncarnation()
	}
	if a.claim, err = a.claimMemberID(ctx); err != nil {
		a.closeOpened()
		return nil, err
	}
	// Keep the caller's reconnect handler and add ours.
	prev := nc.Opts.ReconnectedCB
	nc.SetReconnectHandler(func(c *nats.Conn) {
		if prev != nil {
			prev(c)
		}
		a.onReconnect()
	})
	return a, nil
}

// closeOpened undoes what Open made, on its error paths.
func (a *Agent) closeOpened() {
	if a.bgStop != nil {
		a.bgStop()
	}
	if a.queries != nil {
		a.queries.close()
	}
	a.replays.close()
	a.tails.close()
}

// settleAttempt bounds one try of a setup step in Open.
const settleAttempt = 5 * time.Second

// settle runs fn, an idempotent setup step, until it succeeds, fails for
// good, or ctx ends. A JetStream cluster that is still forming, or a bucket
// whose replicas have not elected a leader yet, answers nobody ("no
// responders") or leaves a request unanswered: such a try is made again.
func settle(ctx context.Context, fn func(context.Context) error) error {
	for {
		tctx, cancel := context.WithTimeout(ctx, settleAttempt)
		err := fn(tctx)
		cancel()
		unanswered := errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
		if !unanswered || !group.Sleep(ctx, 100*time.Millisecond) {
			return err
		}
	}
}

// hostname names this machine in the member record, for the error of an
// agent refused its member ID.
func hostname() string {
	h, _ := os.Hostname()
	return h
}

func newIncarnation() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run takes part in the group until ctx ends: heartbeats, election and
// leading, applying generations, progress, the worker watch. It returns nil when ctx ends, or
// the first error that stops it. Run does not leave the group: call Leave
// and wait for the shutdown signal first for a graceful exit.
func (a *Agent) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.runHeartbeat(gctx) })
	g.Go(func() error { return a.runProgress(gctx) })
	g.Go(func() error { return a.runMember(gctx) })
	g.Go(func() error { return a.runElection(gctx) })
	g.Go(func() error { return a.runSnapshots(gctx) })
	g.Go(func() error { return a.runWorkerWatch(gctx) })
	g.Go(func() error { return a.runHandoffs(gctx) })
	err := g.Wait()
	a.stopAllTasks()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Close removes the member's record (so the group sees it gone at once) and
// stops background work. The NATS connection and the store belong to the
// caller.
func (a *Agent) Close() error {
	a.stopAllTasks()
	defer a.closeOpened()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return a.claim.Release(ctx)
}

// Abandon stops background work and closes the agent's replay connections
// without deleting the member record: the group learns that the member is
// gone only when the record expires, as after a crash.
func (a *Agent) Abandon() {
	a.stopAllTasks()
	a.closeOpened()
}

func (a *Agent) stopAllTasks() {
	// Under a.mu, which every start of a job holds: none starts after this
	// (startJobLocked), so the Wait below cannot race an Add.
	a.mu.Lock()
	a.bgStop()
	// A stopped agent serves no task from memory: its reads, if any
	// still come, go to the store.
	for _, t := range a.tasks {
		t.mu.Lock()
		t.cache.drop()
		t.mu.Unlock()
	}
	a.mu.Unlock()
	a.bg.Wait()
	a.incoming.clear()
}

// groupConfig is the group config in force, with each task's kind. It is
// replaced whole, never changed.
type groupConfig struct {
	cfg   assign.Config
	kinds map[string]bool // task -> stateful
}

// config returns the group config in force.
func (a *Agent) config() assign.Config { return a.conf.Load().cfg }

func (a *Agent) setConfig(cfg assign.Config) error {
	tasks, err := cfg.Tasks()
	if err != nil {
		return fmt.Errorf("group config: %w", err)
	}
	kinds := make(map[string]bool, len(tasks))
	for _, t := range tasks {
		kinds[t.ID] = t.Stateful
	}
	a.conf.Store(&groupConfig{cfg: cfg, kinds: kinds})
	return nil
}

// taskKind reports whether task exists in the group and is stateful.
func (a *Agent) taskKind(task string) (stateful, ok bool) {
	stateful, ok = a.conf.Load().kinds[task]
	return stateful, ok
}

// kickLeader wakes the leader loop, if this member leads.
func (a *Agent) kickLeader() {
	if ld := a.leader.Load(); ld != nil {
		ld.wake()
	}
}

// onReport passes a learner's report to the leader, if this member leads.
func (a *Agent) onReport(p group.Progress) {
	if ld := a.leader.Load(); ld != nil {
		ld.onReport(p)
	}
}

// kickHeartbeat makes the heartbeat loop publish the member record now.
func (a *Agent) kickHeartbeat() {
	select {
	case a.hbKick <- struct{}{}:
	default:
	}
}

// bumpView records a change of the worker's view and wakes long-polls.
// Callers hold a.mu.
func (a *Agent) bumpViewLocked() {
	a.version++
	close(a.changed)
	a.changed = make(chan struct{})
}

// Leading reports whether this member currently leads the group.
func (a *Agent) Leading() bool { return a.leader.Load() != nil }

// stamp formats a step's time for a log line, to the microsecond: zerolog's
// Time fields have whole seconds unless a global is changed.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

package agent

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
)

// metrics are the agent's Prometheus metrics. docs/metrics.md lists them;
// a test keeps that list and this file in step.
type metrics struct {
	handoffPause  prometheus.Histogram
	learnerLag    *prometheus.GaugeVec
	restoreRate   *prometheus.GaugeVec
	commits       prometheus.Counter
	commitRecords prometheus.Counter
	commitSeconds prometheus.Histogram
	fenced        prometheus.Counter
	// directTakeovers counts the tasks this member took over directly.
	directTakeovers prometheus.Counter
	// activationReplayed counts changelog messages replayed by activations
	// themselves: what a task waited for before it could serve.
	activationReplayed prometheus.Counter
	generation         prometheus.Gauge
	leader             prometheus.Gauge
	planSeconds        prometheus.Histogram
	// promotionDelay is, on the leader, the time from hearing that a
	// learner caught up to publishing the revoke that promotes it.
	promotionDelay prometheus.Histogram
	// workerState is 1 for the worker's current state, 0 for the others;
	// workerLostTasks counts the tasks released for a lost worker.
	workerState     *prometheus.GaugeVec
	workerLostTasks prometheus.Counter
	// storeRebuilds counts starts that found the local store corrupt and
	// replaced it with an empty one; restoreRefused counts activations
	// refused because a task's state is nowhere to be found.
	storeRebuilds  prometheus.Counter
	restoreRefused prometheus.Counter
	// reads counts the worker's reads of state by kind; readKeys the keys
	// they asked for (a scan: the items it returned).
	reads                           *prometheus.CounterVec
	readsGet, readsBatch, readsScan prometheus.Counter
	readKeys                        prometheus.Counter
	// cacheHits and cacheMisses count the keys the worker's reads found
	// in its task's record cache and did not; cacheHeld is what the
	// record caches hold, in bytes (cache.go).
	cacheHits, cacheMisses prometheus.Counter
	cacheHeld              atomic.Int64
	// groupMembers and unownedTasks are the leader's: the live members it
	// plans for, and the tasks its assignment gives no active owner. 0 on
	// the other members.
	groupMembers prometheus.Gauge
	unownedTasks prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		handoffPause: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "handoff_handoff_pause_seconds",
			Help:    "Time from the previous owner's release of a task to this member serving it (planned moves).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 10},
		}),
		learnerLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handoff_learner_lag_messages",
			Help: "Changelog messages this member's copy of a task still has to apply (learners, standbys, activations).",
		}, []string{"task"}),
		restoreRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handoff_restore_rate_messages_per_second",
			Help: "Recent replay rate of a task's restore on this member.",
		}, []string{"task"}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handoff_commits_total",
			Help: "Commits acknowledged to the worker (appended to the changelog and applied).",
		}),
		commitRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handoff_commit_records_total",
			Help: "Puts and deletes in acknowledged commits.",
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "handoff_commit_seconds",
			Help:    "Latency of a commit: fenced append plus local apply.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handoff_fenced_total",
			Help: "Appends refused because another member owns the task (stale owner fenced).",
		}),
		directTakeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handoff_direct_takeovers_total",
			Help: "Tasks this member took over directly from their previous owner's release (a release entry in the changelog naming it, or for a stateless task the owner's message), without waiting for the leader.",
		}),
		activationReplayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handoff_activation_replayed_messages_total",
			Help: "Changelog messages replayed while a task was becoming active here (it could not serve meanwhile); planned moves replay none.",
		}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "handoff_generation",
			Help: "The group generation this member has applied.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "handoff_leader",
			Help: "1 while this member leads the group.",
		}),
		planSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "handoff_plan_seconds",
			Help:    "Time the leader's assignor takes per plan.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10),
		}),
		promotionDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "handoff_promotion_delay_seconds",
			Help:    "On the leader: time from a learner's caught-up report to the revoke that promotes it (eager mode's reaction time; stable mode waits for its round).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		workerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handoff_worker_state",
			Help: "1 for the state of this member's worker (attached, detached, lost), 0 for the others; none with --require-worker=false.",
		}, []string{"state"}),
		workerLostTasks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handoff_worker_lost_tasks_total",
			Help: "Active tasks this agent released on behalf of its lost worker (detached for the worker timeout), so that they moved.",
		}),
		storeRebuilds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handoff_store_rebuilds_total",
			Help: "Starts that found the local store corrupt, moved it aside and started it empty, to be rebuilt from snapshots and the changelog.",
		}),
		restoreRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handoff_restore_refused_total",
			Help: "Activations refused because the group's records show the task has history but no local copy, snapshot or changelog message of it is left (the changelog was purged).",
		}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_state_reads_total",
			Help: "The worker's reads of its tasks' state, by kind: get (one key), batch (POST /tasks/{id}/get) or scan.",
		}, []string{"kind"}),
		readKeys: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handoff_state_read_keys_total",
			Help: "Keys the worker's reads asked for (a scan: the items it returned).",
		}),
		groupMembers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "handoff_group_members",
			Help: "On the leader: the group's live members it plans for (0 on the other members: take the max over the group).",
		}),
		unownedTasks: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "handoff_unowned_tasks",
			Help: "On the leader: the group's tasks that its assignment gives no active owner, because no live member can take them (0 on the other members: take the max over the group).",
		}),
	}
	m.cacheHits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "handoff_record_cache_hits_total",
		Help: "Keys the worker's reads (single and batch gets) found in its active task's record cache.",
	})
	m.cacheMisses = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "handoff_record_cache_misses_total",
		Help: "Keys the worker's reads (single and batch gets) did not find in its active task's record cache and read from the local store.",
	})
	cacheBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "handoff_record_cache_bytes",
		Help: "Bytes the record caches of this member's active tasks hold: keys, values and bookkeeping (bounded by --store-record-cache-mb).",
	}, func() float64 { return float64(m.cacheHeld.Load()) })
	// The children, made once: a read only adds to them.
	m.readsGet, m.readsBatch, m.readsScan = m.reads.WithLabelValues("get"), m.reads.WithLabelValues("batch"), m.reads.WithLabelValues("scan")
	if reg != nil {
		reg.MustRegister(m.reads, m.readKeys, m.cacheHits, m.cacheMisses, cacheBytes)
		reg.MustRegister(m.handoffPause, m.learnerLag, m.restoreRate, m.commits, m.commitRecords,
			m.commitSeconds, m.fenced, m.directTakeovers, m.activationReplayed, m.generation, m.leader, m.planSeconds, m.promotionDelay,
			m.storeRebuilds, m.restoreRefused, m.workerState, m.workerLostTasks, m.groupMembers, m.unownedTasks)
	}
	return m
}

// setLeading sets the leader's gauges from the assignment it published and
// the members it planned for.
func (m *metrics) setLeading(members int, a assign.Assignment) {
	unowned := 0
	for _, ta := range a.Tasks {
		if ta.Active == "" {
			unowned++
		}
	}
	m.groupMembers.Set(float64(members))
	m.unownedTasks.Set(float64(unowned))
}

// stopLeading clears the leader's gauges once this member no longer leads.
func (m *metrics) stopLeading() {
	m.groupMembers.Set(0)
	m.unownedTasks.Set(0)
}

// memberCollector reports, at each scrape, what the member's view and
// store say now: the tasks it holds by role, and whether its store takes
// writes. Reading them when scraped keeps them off the paths that change
// them.
type memberCollector struct {
	a               *Agent
	tasks, writable *prometheus.Desc
}

func newMemberCollector(a *Agent) memberCollector {
	return memberCollector{
		a: a,
		tasks: prometheus.NewDesc("handoff_tasks",
			"Tasks this member holds, by role: active (its worker processes them; revoked ones included until released), learner or standby.",
			[]string{"role"}, nil),
		writable: prometheus.NewDesc("handoff_store_writable",
			"1 while the local store takes writes; 0 while it refuses them (its disk is short of space, or it failed): commits are answered 503 and /readyz is not ready.",
			nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c memberCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.tasks
	ch <- c.writable
}

// Collect implements prometheus.Collector.
func (c memberCollector) Collect(ch chan<- prometheus.Metric) {
	count := map[string]int{}
	for _, tv := range c.a.Assignment().Tasks {
		count[tv.Role]++
	}
	for _, role := range []string{api.RoleActive, api.RoleLearner, api.RoleStandby} {
		ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, float64(count[role]), role)
	}
	writable := 1.0
	if c.a.store.Writable() != nil {
		writable = 0
	}
	ch <- prometheus.MustNewConstMetric(c.writable, prometheus.GaugeValue, writable)
}

// setWorkerState makes s the worker's one current state.
func (m *metrics) setWorkerState(s assign.WorkerState) {
	for _, st := range []assign.WorkerState{assign.WorkerAttached, assign.WorkerDetached, assign.WorkerLost} {
		v := 0.0
		if st == s {
			v = 1
		}
		m.workerState.WithLabelValues(string(st)).Set(v)
	}
}

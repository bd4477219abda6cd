package lab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/countworker"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/internal/cluster"
	"github.com/handoffhq/handoff/internal/record"
	"github.com/handoffhq/handoff/internal/sidecar"
)

// Member states in the lab (not the agent's states).
const (
	MemberRunning = "running"
	MemberLeaving = "leaving" // POST /leave was called; the member hands its tasks over
	MemberLeft    = "left"    // it left the group and stopped
	MemberCrashed = "crashed"
	MemberStopped = "stopped"
)

// Member is one member of the lab: an agent with its store, connections,
// HTTP API and counter worker, in this process (cluster.Local) or as
// processes (cluster.Process). Its data directory survives a restart.
type Member struct {
	ID  string
	Dir string
	lab *Lab

	// mu guards the fields below. The recorder reads the agent under the
	// read lock, and a teardown takes the write lock before it closes the
	// store, so a sample never touches a closed store.
	mu    sync.RWMutex
	state string
	inc   *incarnation
	// activationReplayed sums the activation-replay counters of the
	// member's ended incarnations.
	activationReplayed float64
	// directTakeovers sums handoff_direct_takeovers_total the same way.
	directTakeovers float64
	starts          int
	failures        []error // incarnations that could not be stopped
	// procs is the member's processes when the lab runs processes, kept
	// across restarts (their logs are appended to).
	procs *cluster.Process
	// unread are the worker events read from procs, not yet given to the
	// recorder, and eventsRead how many procs.Events has given; both are
	// guarded by the lab's readMu.
	unread     []record.Event
	eventsRead int
}

// incarnation is one start of a member, from start to teardown.
type incarnation struct {
	local  *cluster.Local // the store, agent, API and worker, in process
	reg    *prometheus.Registry
	client *client.Client
	addr   string
	// procs is set, and local is not, when the member runs as processes;
	// views follows the agent's view, and the channels close once the
	// processes have exited.
	procs                 *cluster.Process
	views                 *viewFollower
	agentDone, workerDone chan struct{}
	workerErr             error // the worker process could not start

	// calls counts the calls into the agent in flight (samples); stuck
	// is set once one did not return within viewWait.
	calls  sync.WaitGroup
	stuck  atomic.Bool
	asking atomic.Bool // a sample's call is in flight

	once  sync.Once
	ended chan struct{} // closed once torn down
	err   error         // what the teardown could not stop
}

// start starts a new incarnation of m from its data directory.
func (m *Member) start(ctx context.Context) error {
	inc, err := m.open(ctx)
	if err != nil {
		return err
	}
	m.run(inc)
	return nil
}

// open prepares a new incarnation of m: connections, store, agent and API
// listener. Nothing runs yet; run starts it.
func (m *Member) open(ctx context.Context) (_ *incarnation, err error) {
	l := m.lab
	if l.opts.Processes != nil {
		return m.openProcesses(ctx)
	}
	log := l.log.With().Str("member", m.ID).Logger()
	inc := &incarnation{ended: make(chan struct{}), reg: prometheus.NewRegistry()}
	inc.local, err = cluster.OpenLocal(ctx, cluster.LocalOptions{
		Connect: func(name string) (*nats.Conn, error) { return l.connect("handoff-lab-" + name) },
		Sidecar: sidecar.Options{
			DataDir: m.Dir,
			Agent: agent.Options{
				Group: l.opts.Group, MemberID: m.ID, Config: l.opts.Config, Logger: l.log, Registerer: inc.reg,
				RequireWorker: true, // its worker polls the API over HTTP, as in production
			},
			Listen: l.listenAddr(m),
			API: httpapi.Options{
				Metrics: promhttp.HandlerFor(inc.reg, promhttp.HandlerOpts{}),
				Logger:  log.With().Str("component", "api").Logger(),
			},
			Logger: log,
		},
		Worker: &countworker.Options{
			Group:    l.opts.Group,
			Batch:    l.opts.Batch,
			MaxDelay: l.opts.MaxDelay,
			NoCache:  l.opts.NoCache,
			OnEvent:  func(e countworker.Event) { l.rec.workerEvent(record.WorkerEvent(m.ID, e)) },
			Logger:   log.With().Str("component", "worker").Logger(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	inc.addr = inc.local.Member.Addr.String()
	inc.client = client.New(cluster.APIURL(inc.addr))
	return inc, nil
}

// abort closes an opened incarnation that never ran.
func (inc *incarnation) abort() {
	if inc.procs != nil {
		_ = inc.procs.Agent.Kill()
		return
	}
	inc.local.Abort()
}

// run starts an opened incarnation: agent, API and worker. It runs until
// torn down.
func (m *Member) run(inc *incarnation) {
	if inc.procs != nil {
		m.runProcesses(inc)
	} else if err := inc.local.Start(); err != nil {
		m.lab.log.Error().Err(err).Str("member", m.ID).Msg("start")
	}
	m.mu.Lock()
	m.inc, m.state = inc, MemberRunning
	m.starts++
	m.mu.Unlock()
	go m.supervise(inc)
}

// workerEnded is closed once the incarnation's worker has returned.
func (inc *incarnation) workerEnded() <-chan struct{} {
	if inc.procs != nil {
		return inc.workerDone
	}
	return inc.local.WorkerDone()
}

// supervise tears the incarnation down once its worker returns on its own:
// the agent said shutdown after a leave.
func (m *Member) supervise(inc *incarnation) {
	select {
	case <-inc.workerEnded():
		_ = m.teardown(inc, true, MemberLeft) // logged; Close reports it again
	case <-inc.ended:
	}
}

// stopWait bounds each wait of a teardown: a component that has not
// stopped by then is stuck (an agent deadlock, say), and the lab gives up
// on it rather than hang.
const stopWait = 20 * time.Second

// teardown stops the incarnation once. A graceful one stops the worker
// first (its last commits land) and deletes the member record; a crash
// drops the NATS connection first and leaves the record to expire. A
// component that does not stop within stopWait is left behind, with its
// store open, and reported in the error.
func (m *Member) teardown(inc *incarnation, graceful bool, state string) error {
	inc.once.Do(func() {
		defer close(inc.ended)
		m.mu.Lock() // no new samples from here on
		if m.inc == inc {
			m.inc, m.state = nil, state
		}
		m.mu.Unlock()
		if inc.procs != nil {
			m.teardownProcesses(inc, graceful, state)
			return
		}
		t0 := time.Now()
		err := inc.local.Halt(graceful, stopWait)
		m.lab.log.Debug().Str("member", m.ID).Dur("took", time.Since(t0)).Msg("teardown")
		calls := make(chan struct{})
		go func() {
			inc.calls.Wait()
			close(calls)
		}()
		if !cluster.WaitClosed(calls, stopWait) {
			err = errors.Join(err, fmt.Errorf("member %s: the agent's view did not return within %s", m.ID, stopWait))
		}

		replayed := counterValue(inc.reg, metricActivationReplayed)
		direct := counterValue(inc.reg, metricDirectTakeovers)
		m.mu.Lock()
		m.activationReplayed += replayed
		m.directTakeovers += direct
		m.mu.Unlock()
		if state == MemberLeft {
			m.lab.rec.mark(Mark{Kind: MarkLeft, Member: m.ID})
		}
		if err != nil {
			// Closing the store under a running agent would crash the
			// process: leave it open.
			inc.err = fmt.Errorf("lab: %w", err)
			m.lab.log.Error().Err(inc.err).Str("member", m.ID).Msg("teardown")
			m.mu.Lock()
			m.failures = append(m.failures, inc.err)
			m.mu.Unlock()
			inc.local.CloseConnections()
			return
		}
		if err := inc.local.Close(graceful); err != nil {
			m.lab.log.Warn().Err(err).Str("member", m.ID).Msg("close member")
		}
	})
	<-inc.ended
	return inc.err
}

// stop stops the member gracefully, without a leave, if it runs, and
// returns what went wrong in this or an earlier teardown.
func (m *Member) stop() error {
	m.mu.RLock()
	inc := m.inc
	m.mu.RUnlock()
	var err error
	if inc != nil && m.teardown(inc, true, MemberStopped) == nil {
		err = inc.workerErr
		if inc.local != nil {
			err = inc.local.Err()
		}
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return errors.Join(append([]error{err}, m.failures...)...)
}

// State is the member's state in the lab (Member*).
func (m *Member) State() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.state
}

// running reports whether an incarnation of the member runs.
func (m *Member) running() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.inc != nil
}

// Addr is the member's API address while it runs.
func (m *Member) Addr() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.inc == nil {
		return ""
	}
	return m.inc.addr
}

// URL is the member's API as a client takes it (http://HOST:PORT or
// unix:PATH) while it runs.
func (m *Member) URL() string {
	if a := m.Addr(); a != "" {
		return cluster.APIURL(a)
	}
	return ""
}

// listenAddr is the address member m's API listens on.
func (l *Lab) listenAddr(m *Member) string { return cluster.Listen(m.Dir, l.opts.Socket) }

// slowView is how long a sample's call into an agent may take before the
// lab writes every goroutine's stack to its data directory (once), to show
// what holds the agent up.
const slowView = 250 * time.Millisecond

// viewWait bounds a sample's call into an agent. An agent whose lock is
// held through a slow NATS call answers late; one that has not answered
// for this long is taken for deadlocked.
const viewWait = 30 * time.Second

// viewResult is an agent's answer to a sample: its view, whether it
// leads, and ok false when the member does not run or did not answer.
type viewResult struct {
	view    api.View
	leading bool
	ok      bool
}

// fetchView asks the running agent for its view; the channel delivers the
// answer once it comes. At most one call per incarnation is in flight: while
// one is, and once the agent is stuck (no answer for viewWait), the channel
// delivers a result with ok false at once. The member's lock is not held
// during the call, and a teardown waits for it before it closes the store
// the call may read.
func (m *Member) fetchView() <-chan viewResult {
	out := make(chan viewResult, 1)
	m.mu.RLock()
	inc := m.inc
	if inc == nil || inc.stuck.Load() || !inc.asking.CompareAndSwap(false, true) {
		m.mu.RUnlock()
		out <- viewResult{}
		return out
	}
	inc.calls.Add(1)
	m.mu.RUnlock()
	done := make(chan struct{})
	go func() {
		defer inc.calls.Done()
		r := m.askView(inc)
		inc.asking.Store(false)
		close(done)
		out <- r
	}()
	go func() {
		if !cluster.WaitClosed(done, slowView) {
			m.lab.dumpStacks(m.ID)
		}
		if !cluster.WaitClosed(done, viewWait) {
			inc.stuck.Store(true)
			m.lab.log.Error().Str("member", m.ID).Msgf("the agent has not answered for %s: it is stuck; the lab stops asking it", viewWait)
		}
	}()
	return out
}

// ActivationReplayed is how many changelog messages this member's
// activations replayed (handoff_activation_replayed_messages_total, summed
// over its incarnations).
func (m *Member) ActivationReplayed() float64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.procs != nil {
		return float64(m.procs.Log.Replayed())
	}
	return m.summedLocked(metricActivationReplayed, m.activationReplayed)
}

// DirectTakeovers is how many tasks this member took over directly from a
// release entry or a hand-off message (handoff_direct_takeovers_total,
// summed over its incarnations).
func (m *Member) DirectTakeovers() float64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.procs != nil {
		return float64(len(m.procs.Log.TakeoversAfter(0)))
	}
	return m.summedLocked(metricDirectTakeovers, m.directTakeovers)
}

const (
	metricActivationReplayed = "handoff_activation_replayed_messages_total"
	metricDirectTakeovers    = "handoff_direct_takeovers_total"
)

// summedLocked is a counter of the running incarnation plus past, what the
// ended ones counted. Callers hold m.mu.
func (m *Member) summedLocked(name string, past float64) float64 {
	if m.inc != nil {
		past += counterValue(m.inc.reg, name)
	}
	return past
}

// counterValue sums a counter of reg over its labels; 0 if it is missing.
func counterValue(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue()
		}
	}
	return v
}

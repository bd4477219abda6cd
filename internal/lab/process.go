package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/countworker"
	"github.com/handoffhq/handoff/internal/invariants"
	"github.com/handoffhq/handoff/internal/proc"
)

// Processes, set in Options, runs each member as the deployment does: a
// `handoff agent` process and an examples/counter worker process that talks
// to it over HTTP, on a nats-server process of the lab's own (unless
// Options.NATSURL is set). The lab then reads each worker's events from its
// --events file and follows each agent's view with a long-poll of GET
// /assignment; times still come from one clock, the machine's.
type Processes struct {
	Binaries proc.Binaries
	// AgentArgs are added to every agent's command line, AgentEnv to its
	// environment: for A/B runs of a setting.
	AgentArgs []string
	AgentEnv  []string
}

// apiWait bounds how long an agent process may take to serve its API.
const apiWait = 60 * time.Second

// memberProcs are a member's processes and what the lab reads of them,
// kept across the member's restarts (the logs are appended to).
type memberProcs struct {
	agent, worker *proc.Process
	events        proc.LineReader // the worker's --events file
	log           proc.LineReader // the agent's JSON log

	mu          sync.Mutex
	unread      []countworker.Event // worker events read, not yet given to the recorder
	api         string              // from the last "agent started" line; "" before it
	replayed    float64             // "task active" lines' replayed, summed
	agentEvents []AgentEvent
}

// AgentEvent is one line of an agent process's JSON log.
type AgentEvent struct {
	Member     string    `json:"member"`
	At         time.Time `json:"at"`
	Message    string    `json:"message"`
	Task       string    `json:"task,omitempty"`
	To         string    `json:"to,omitempty"`   // a plan's new owner
	Kind       string    `json:"kind,omitempty"` // a plan's kind of move
	Epoch      uint64    `json:"epoch,omitempty"`
	Generation uint64    `json:"generation,omitempty"`
	// Stamp is when the line's step happened, where the line says
	// (received, seen, fenced): the agent logs a step once its work is
	// done. Else it is At.
	Stamp time.Time `json:"stamp"`
	// Appended is when a "task released" line's release entry was
	// appended, and Direct whether it hands the task over directly;
	// Received is when a "task taken over" line's tailer received it.
	Appended time.Time `json:"appended,omitzero"`
	Received time.Time `json:"received,omitzero"`
	Direct   bool      `json:"direct,omitempty"`
	// Activation splits a "task active" line's activation into its
	// steps, in the order of ActivationSteps.
	Activation []time.Duration `json:"activation,omitempty"`
	// Read is how long a "generation applied" line's member took to read
	// its assignment after it saw the record; nil where the line does not
	// say.
	Read *time.Duration `json:"read,omitempty"`
}

// agentLine holds the fields of an agent's log line the lab reads.
type agentLine struct {
	Time       time.Time `json:"time"`
	Message    string    `json:"message"`
	Task       string    `json:"task"`
	To         string    `json:"to"`
	Kind       string    `json:"kind"`
	Epoch      uint64    `json:"epoch"`
	Generation uint64    `json:"generation"`
	Received   time.Time `json:"received"`
	Seen       time.Time `json:"seen"`
	Fenced     time.Time `json:"fenced"`
	Appended   time.Time `json:"appended"`
	Direct     bool      `json:"direct"`
	Replayed   uint64    `json:"replayed"`
	API        string    `json:"api"`
	// A "task active" line's activation steps, in ms; nil where an agent
	// does not log them.
	WaitTailer *float64 `json:"waitTailer"`
	StopTailer *float64 `json:"stopTailer"`
	CatchUp    *float64 `json:"catchUp"`
	Append     *float64 `json:"append"`
	Apply      *float64 `json:"apply"`
	// A "generation applied" line's read of the member's assignment, in ms.
	Read *float64 `json:"read"`
}

// procsOf returns m's processes, preparing them on first use.
func (m *Member) procsOf() (*memberProcs, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.procs != nil {
		return m.procs, nil
	}
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("lab: directory of %s: %w", m.ID, err)
	}
	l := m.lab
	po := l.opts.Processes
	p := &memberProcs{
		agent: &proc.Process{Name: "agent-" + m.ID, Path: po.Binaries.Handoff, Args: l.agentArgs(m),
			LogPath: filepath.Join(m.Dir, "agent.log"), Env: po.AgentEnv},
		worker: &proc.Process{Name: "worker-" + m.ID, Path: po.Binaries.Counter, LogPath: filepath.Join(m.Dir, "worker.log")},
	}
	p.events = proc.LineReader{Path: filepath.Join(m.Dir, "events.jsonl"), Parse: func(line []byte) error {
		var e invariants.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		p.mu.Lock()
		p.unread = append(p.unread, countworker.Event{Time: e.Time, Kind: e.Type, Task: e.Task, Epoch: e.Epoch, Seq: e.Seq,
			Checkpoint: e.Checkpoint, Records: e.Records, Code: e.Code})
		p.mu.Unlock()
		return nil
	}}
	p.log = proc.LineReader{Path: p.agent.LogPath, Parse: func(line []byte) error {
		var a agentLine
		if err := json.Unmarshal(line, &a); err != nil {
			return err
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		switch a.Message {
		case LogAgentStarted:
			p.api = a.API
		case LogTaskActive:
			p.replayed += float64(a.Replayed)
		}
		ev := AgentEvent{Member: m.ID, At: a.Time, Message: a.Message, Task: a.Task, To: a.To, Kind: a.Kind,
			Epoch: a.Epoch, Generation: a.Generation, Stamp: a.Time, Appended: a.Appended, Direct: a.Direct}
		if a.Message == LogTaskTakenOver {
			ev.Received = a.Received
		}
		if a.Message == LogTaskActive && a.WaitTailer != nil {
			for _, ms := range []*float64{a.WaitTailer, a.StopTailer, a.CatchUp, a.Append, a.Apply} {
				var d time.Duration
				if ms != nil {
					d = time.Duration(*ms * float64(time.Millisecond))
				}
				ev.Activation = append(ev.Activation, d)
			}
		}
		if a.Message == LogGenerationApplied && a.Read != nil {
			d := time.Duration(*a.Read * float64(time.Millisecond))
			ev.Read = &d
		}
		for _, s := range []time.Time{a.Received, a.Seen, a.Fenced} {
			if !s.IsZero() {
				ev.Stamp = s
			}
		}
		p.agentEvents = append(p.agentEvents, ev)
		return nil
	}}
	m.procs = p
	return p, nil
}

// agentArgs is member m's `handoff agent` command line: the lab's group
// config as flags, JSON logs, an API on a free port.
func (l *Lab) agentArgs(m *Member) []string {
	c := l.opts.Config
	args := []string{"agent",
		"--nats", l.url,
		"--group", l.opts.Group,
		"--member-id", m.ID,
		"--listen", l.listenAddr(m),
		"--data-dir", filepath.Join(m.Dir, "data"),
		"--log-format", "json",
		"--log-level", l.opts.AgentLevel.String(),
		"--handover", string(c.Handover),
		"--acceptable-lag", strconv.FormatUint(c.AcceptableLag, 10),
		"--max-learners", strconv.Itoa(c.MaxLearners),
		"--max-learners-per-member", strconv.Itoa(c.MaxLearnersPerMember),
		"--standbys", strconv.Itoa(c.Standbys),
		"--session-timeout", c.SessionTimeout.D().String(),
		"--leave-timeout", c.LeaveTimeout.D().String(),
		"--release-timeout", c.ReleaseTimeout.D().String(),
		"--stable-max-wait", c.StableMaxWait.D().String(),
	}
	if len(c.Stateful) > 0 {
		args = append(args, "--tasks", strings.Join(c.Stateful, ","))
	}
	if len(c.Stateless) > 0 {
		args = append(args, "--stateless-tasks", strings.Join(c.Stateless, ","))
	}
	return append(args, l.opts.Processes.AgentArgs...)
}

// workerArgs is the counter's command line against the agent at api.
func (l *Lab) workerArgs(m *Member, api string) []string {
	args := []string{
		"--sidecar", apiURL(api),
		"--nats", l.url,
		"--group", l.opts.Group,
		"--events", filepath.Join(m.Dir, "events.jsonl"),
	}
	if l.opts.Batch > 0 {
		args = append(args, "--batch", strconv.Itoa(l.opts.Batch))
	}
	if l.opts.MaxDelay > 0 {
		args = append(args, "--max-delay", l.opts.MaxDelay.String())
	}
	if l.opts.NoCache {
		args = append(args, "--cache=false")
	}
	return args
}

// openProcesses starts m's agent process and waits until it serves its
// API. The worker starts in runProcesses.
func (m *Member) openProcesses(ctx context.Context) (*incarnation, error) {
	p, err := m.procsOf()
	if err != nil {
		return nil, err
	}
	_ = p.log.Refresh() // what earlier runs logged, so that their address is not taken for this one's
	p.mu.Lock()
	p.api = ""
	p.mu.Unlock()
	if err := p.agent.Start(); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	api, err := p.waitAPI(ctx)
	if err != nil {
		_ = p.agent.Kill()
		return nil, fmt.Errorf("lab: the agent of %s: %w (see %s)", m.ID, err, p.agent.LogPath)
	}
	return &incarnation{
		agentDone: make(chan struct{}), apiDone: make(chan struct{}), workerDone: make(chan struct{}),
		ended: make(chan struct{}), procs: p, addr: api, client: client.New(apiURL(api)),
	}, nil
}

// waitAPI waits until the agent has logged its API address.
func (p *memberProcs) waitAPI(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, apiWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	exited := p.agent.Exited()
	for {
		if err := p.log.Refresh(); err != nil {
			return "", err
		}
		p.mu.Lock()
		api := p.api
		p.mu.Unlock()
		if api != "" {
			return api, nil
		}
		select {
		case <-exited:
			return "", fmt.Errorf("exited while starting: %v", p.agent.ExitErr())
		case <-ctx.Done():
			return "", fmt.Errorf("no API address logged: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// viewFollower long-polls an agent process's view and keeps the latest,
// so that a sample reads it without a request of its own: sampling adds no
// load to the agents, and a view is seen the moment it changes.
type viewFollower struct {
	cancel context.CancelFunc
	done   chan struct{}
	latest atomic.Pointer[api.View]
}

// followView starts following cl's view until stop.
func followView(cl *client.Client) *viewFollower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &viewFollower{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		var after uint64
		for ctx.Err() == nil {
			v, err := cl.Assignment(ctx, after, 30*time.Second)
			if err != nil {
				// Not up yet, or gone: ask again soon, or end with ctx.
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
				continue
			}
			f.latest.Store(&v)
			after = v.Version
		}
	}()
	return f
}

// view returns the latest view, if one came.
func (f *viewFollower) view() (api.View, bool) {
	if v := f.latest.Load(); v != nil {
		return *v, true
	}
	return api.View{}, false
}

func (f *viewFollower) stop() {
	f.cancel()
	<-f.done
}

// runProcesses starts the worker process of an opened incarnation.
func (m *Member) runProcesses(inc *incarnation) {
	p := inc.procs
	inc.views = followView(inc.client)
	agentExited := p.agent.Exited()
	p.worker.Args = m.lab.workerArgs(m, inc.addr)
	if err := p.worker.Start(); err != nil {
		inc.workerErr = err
		close(inc.workerDone)
	} else {
		workerExited := p.worker.Exited()
		go func() {
			<-workerExited
			close(inc.workerDone)
		}()
	}
	go func() {
		<-agentExited
		close(inc.agentDone)
		close(inc.apiDone)
	}()
	m.mu.Lock()
	m.inc, m.state = inc, MemberRunning
	m.starts++
	m.mu.Unlock()
	go m.supervise(inc)
}

// teardownProcesses ends an incarnation of processes. After a leave the
// worker has exited, and the agent, which has left, gets SIGTERM and
// stopWait to exit. Otherwise both are killed: the agent first for a crash (the
// group sees nothing more from the member), the worker first for a stop.
func (m *Member) teardownProcesses(inc *incarnation, graceful bool, state string) {
	p := inc.procs
	m.mu.Lock()
	if m.inc == inc {
		m.inc, m.state = nil, state
	}
	m.mu.Unlock()
	var errs []error
	switch {
	case state == MemberLeft:
		// An agent keeps serving after a leave over its API, until it is
		// told to stop: it has left, so it exits at once.
		_ = p.agent.Terminate()
		if !waitClosed(inc.agentDone, stopWait) {
			errs = append(errs, fmt.Errorf("lab: the agent of %s did not exit within %s of its leave; killed", m.ID, stopWait))
		}
		errs = append(errs, p.agent.Kill())
	case graceful:
		errs = append(errs, p.worker.Kill(), p.agent.Kill())
	default:
		errs = append(errs, p.agent.Kill(), p.worker.Kill())
	}
	<-inc.workerDone
	<-inc.agentDone
	inc.views.stop()
	if state == MemberLeft {
		m.lab.rec.mark(Mark{Kind: MarkLeft, Member: m.ID})
	}
	if err := errors.Join(errs...); err != nil {
		inc.err = err
		m.mu.Lock()
		m.failures = append(m.failures, err)
		m.mu.Unlock()
	}
}

// abortProcesses kills the agent of an incarnation that never ran.
func (inc *incarnation) abortProcesses() { _ = inc.procs.agent.Kill() }

// askView asks the running agent for its view: in process, or over HTTP.
func (m *Member) askView(inc *incarnation) viewResult {
	if inc.procs == nil {
		return viewResult{view: inc.agent.Assignment(), leading: inc.agent.Leading(), ok: true}
	}
	v, ok := inc.views.view()
	if !ok {
		return viewResult{}
	}
	return viewResult{view: v, leading: m.lab.rec.groupLeader() == m.ID, ok: true}
}

// groupLeader is the leader of the latest group view read.
func (r *Recorder) groupLeader() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.group.Leader
}

// readProcessLogs takes in what the members' processes logged since the
// last call: the agents' lines, and the workers' events, which it gives the
// recorder in time order across the workers (a task's start on its new
// owner must not come before its earlier start on the old one). The files
// are read one after the other: an event dated after the first read may
// still be missing from a file read before it came, so such events wait
// for the next call.
func (l *Lab) readProcessLogs() {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	cutoff := time.Now()
	type memberEvent struct {
		member string
		e      countworker.Event
	}
	var events []memberEvent
	for _, mp := range l.processes() {
		p := mp.procs
		_ = p.events.Refresh()
		_ = p.log.Refresh()
		p.mu.Lock()
		later := p.unread[:0]
		for _, e := range p.unread {
			if e.Time.Before(cutoff) {
				events = append(events, memberEvent{mp.id, e})
			} else {
				later = append(later, e)
			}
		}
		p.unread = later
		p.mu.Unlock()
	}
	slices.SortStableFunc(events, func(a, b memberEvent) int { return a.e.Time.Compare(b.e.Time) })
	for _, me := range events {
		l.rec.workerEvent(me.member, me.e)
	}
}

// memberProcesses is a member that runs as processes, and its processes.
type memberProcesses struct {
	id    string
	procs *memberProcs
}

// processes returns the members that run as processes.
func (l *Lab) processes() []memberProcesses {
	var out []memberProcesses
	for _, m := range l.Members() {
		m.mu.RLock()
		if m.procs != nil {
			out = append(out, memberProcesses{m.ID, m.procs})
		}
		m.mu.RUnlock()
	}
	return out
}

// AgentEvents returns the lines of every agent process's log so far, in
// time order; nil for an in-process lab, whose agents share one log.
func (l *Lab) AgentEvents() []AgentEvent {
	l.readProcessLogs()
	var out []AgentEvent
	for _, mp := range l.processes() {
		mp.procs.mu.Lock()
		out = append(out, mp.procs.agentEvents...)
		mp.procs.mu.Unlock()
	}
	slices.SortStableFunc(out, func(a, b AgentEvent) int { return a.At.Compare(b.At) })
	return out
}

// replayedByActivations sums the "task active" lines' replayed counts of
// every run of the agent: the activation-replay counter of its metrics,
// which a killed process takes with it.
func (p *memberProcs) replayedByActivations() float64 {
	_ = p.log.Refresh()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.replayed
}

// startNATSProcess starts the lab's own nats-server process with JetStream.
func (l *Lab) startNATSProcess() error {
	servers, err := proc.NewNATSServers(l.opts.Processes.Binaries.NATSServer, filepath.Join(l.dir, "nats"), 1)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	n := servers[0]
	if err := n.Start(); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiWait)
	defer cancel()
	if err := n.WaitHealthy(ctx); err != nil {
		_ = n.Proc.Kill()
		return fmt.Errorf("lab: %w", err)
	}
	l.natsProc, l.url = n, n.URL()
	return nil
}

// AgentPid is the pid of the member's running agent process; 0 in process
// or when it does not run.
func (m *Member) AgentPid() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.procs == nil {
		return 0
	}
	return m.procs.agent.Pid()
}

// NATSPid is the pid of the lab's nats-server process; 0 when it runs none.
func (l *Lab) NATSPid() int {
	if l.natsProc == nil {
		return 0
	}
	return l.natsProc.Proc.Pid()
}

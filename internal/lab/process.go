package lab

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/cluster"
	"github.com/handoffhq/handoff/internal/proc"
	"github.com/handoffhq/handoff/internal/record"
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

// startWait bounds how long the lab's nats-server process may take to
// start.
const startWait = 60 * time.Second

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

// agentEvent is member's log line a as the breakdown reads it.
func agentEvent(member string, a cluster.AgentLine) AgentEvent {
	ev := AgentEvent{Member: member, At: a.Time, Message: a.Message, Task: a.Task, To: a.To, Kind: a.Kind,
		Epoch: a.Epoch, Generation: a.Generation, Stamp: a.Time, Appended: a.Appended, Direct: a.Direct}
	if a.Message == cluster.LogTaskTakenOver {
		ev.Received = a.Received
	}
	if a.Message == cluster.LogTaskActive && a.WaitTailer != nil {
		for _, ms := range []*float64{a.WaitTailer, a.StopTailer, a.CatchUp, a.Append, a.Apply} {
			var d time.Duration
			if ms != nil {
				d = time.Duration(*ms * float64(time.Millisecond))
			}
			ev.Activation = append(ev.Activation, d)
		}
	}
	if a.Message == cluster.LogGenerationApplied && a.Read != nil {
		d := time.Duration(*a.Read * float64(time.Millisecond))
		ev.Read = &d
	}
	for _, s := range []time.Time{a.Received, a.Seen, a.Fenced} {
		if !s.IsZero() {
			ev.Stamp = s
		}
	}
	return ev
}

// processConfig is how the lab's members run as processes.
func (l *Lab) processConfig() *cluster.ProcessConfig {
	po := l.opts.Processes
	return &cluster.ProcessConfig{
		Binaries:  po.Binaries,
		NATSURL:   l.url,
		Group:     l.opts.Group,
		Config:    l.opts.Config,
		LogLevel:  l.opts.AgentLevel.String(),
		Socket:    l.opts.Socket,
		AgentArgs: po.AgentArgs,
		AgentEnv:  po.AgentEnv,
		Batch:     l.opts.Batch,
		MaxDelay:  l.opts.MaxDelay,
		NoCache:   l.opts.NoCache,
	}
}

// procsOf returns m's processes, preparing them on first use.
func (m *Member) procsOf() (*cluster.Process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.procs != nil {
		return m.procs, nil
	}
	p, err := cluster.NewProcess(m.lab.procs, m.ID, m.Dir)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	m.procs = p
	return p, nil
}

// openProcesses starts m's agent process and waits until it serves its
// API. The worker starts in runProcesses.
func (m *Member) openProcesses(ctx context.Context) (*incarnation, error) {
	p, err := m.procsOf()
	if err != nil {
		return nil, err
	}
	if err := p.StartAgent(ctx); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	return &incarnation{
		agentDone: make(chan struct{}), workerDone: make(chan struct{}),
		ended: make(chan struct{}), procs: p, addr: p.Addr(), client: p.Client(),
	}, nil
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
	agentExited := p.Agent.Exited()
	if err := p.SpawnWorker(); err != nil {
		inc.workerErr = err
		close(inc.workerDone)
	} else {
		workerExited := p.Worker.Exited()
		go func() {
			<-workerExited
			close(inc.workerDone)
		}()
	}
	go func() {
		<-agentExited
		close(inc.agentDone)
	}()
}

// teardownProcesses ends an incarnation of processes. After a leave the
// worker has exited, and the agent, which has left, gets SIGTERM and
// stopWait to exit. Otherwise both are killed: the agent first for a crash (the
// group sees nothing more from the member), the worker first for a stop.
func (m *Member) teardownProcesses(inc *incarnation, graceful bool, state string) {
	p := inc.procs
	var errs []error
	switch {
	case state == MemberLeft:
		// An agent keeps serving after a leave over its API, until it is
		// told to stop: it has left, so it exits at once.
		_ = p.Agent.Terminate()
		if !cluster.WaitClosed(inc.agentDone, stopWait) {
			errs = append(errs, fmt.Errorf("lab: the agent of %s did not exit within %s of its leave; killed", m.ID, stopWait))
		}
		errs = append(errs, p.Agent.Kill())
	case graceful:
		errs = append(errs, p.Worker.Kill(), p.Agent.Kill())
	default:
		errs = append(errs, p.Agent.Kill(), p.Worker.Kill())
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

// askView asks the running agent for its view: in process, or over HTTP.
func (m *Member) askView(inc *incarnation) viewResult {
	if inc.procs == nil {
		a := inc.local.Member.Agent
		return viewResult{view: a.Assignment(), leading: a.Leading(), ok: true}
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

// readProcessLogs takes in what the members' workers logged since the
// last call, and gives it the recorder in time order across the workers (a
// task's start on its new owner must not come before its earlier start on
// the old one). The files are read one after the other: an event dated
// after the first read may still be missing from a file read before it
// came, so such events wait for the next call.
func (l *Lab) readProcessLogs() {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	cutoff := time.Now()
	var events []record.Event
	for _, m := range l.processes() {
		read, _ := m.procs.Events.From(m.eventsRead)
		m.eventsRead += len(read)
		m.unread = append(m.unread, read...)
		later := m.unread[:0]
		for _, e := range m.unread {
			if e.Time.Before(cutoff) {
				events = append(events, e)
			} else {
				later = append(later, e)
			}
		}
		m.unread = later
	}
	slices.SortStableFunc(events, func(a, b record.Event) int { return a.Time.Compare(b.Time) })
	for _, e := range events {
		l.rec.workerEvent(e)
	}
}

// processes returns the members that run as processes.
func (l *Lab) processes() []*Member {
	var out []*Member
	for _, m := range l.Members() {
		m.mu.RLock()
		if m.procs != nil {
			out = append(out, m)
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
	for _, m := range l.processes() {
		for _, a := range m.procs.Log.LinesAfter(0) {
			out = append(out, agentEvent(m.ID, a))
		}
	}
	slices.SortStableFunc(out, func(a, b AgentEvent) int { return a.At.Compare(b.At) })
	return out
}

// startNATSProcess starts the lab's own nats-server process with JetStream.
func (l *Lab) startNATSProcess() error {
	ctx, cancel := context.WithTimeout(context.Background(), startWait)
	defer cancel()
	servers, err := cluster.StartNATS(ctx, l.opts.Processes.Binaries.NATSServer, filepath.Join(l.dir, "nats"), 1)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	l.natsProc, l.url = servers[0], servers[0].URL()
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
	return m.procs.Agent.Pid()
}

// NATSPid is the pid of the lab's nats-server process; 0 when it runs none.
func (l *Lab) NATSPid() int {
	if l.natsProc == nil {
		return 0
	}
	return l.natsProc.Proc.Pid()
}

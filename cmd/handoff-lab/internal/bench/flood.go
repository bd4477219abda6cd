package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/cmd/handoff-lab/internal/flood"
	"github.com/handoffhq/handoff/internal/cluster"
	"github.com/handoffhq/handoff/internal/lab"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/proc"
)

// scenarioFlood measures a worker's calls while another local program
// floods its agent's API with slow bodies ('handoff-lab flood'), each of
// the agent, the flood and the worker a process of its own.
const scenarioFlood = "flood"

// floodStartWait bounds how long a flood may take to open all its
// connections.
const floodStartWait = 60 * time.Second

// FloodSettings are the flood scenario's flags.
type FloodSettings struct {
	Conns         []int           `json:"conns"`
	Transports    []string        `json:"transports"`
	BodyTimeouts  []time.Duration `json:"-"`
	Phase         time.Duration   `json:"-"`
	WorkerTimeout time.Duration   `json:"-"`
	Every         time.Duration   `json:"-"`
	Tasks         int             `json:"tasks"`

	conns, transports, bodyTimeouts string
}

// MarshalJSON writes f with its durations as Go duration strings.
func (f FloodSettings) MarshalJSON() ([]byte, error) {
	type plain FloodSettings
	bts := make([]string, len(f.BodyTimeouts))
	for i, d := range f.BodyTimeouts {
		bts[i] = d.String()
	}
	return json.Marshal(struct {
		plain
		BodyTimeouts  []string `json:"bodyTimeouts"`
		Phase         string   `json:"phase"`
		WorkerTimeout string   `json:"workerTimeout"`
		Every         string   `json:"every"`
	}{plain(f), bts, f.Phase.String(), f.WorkerTimeout.String(), f.Every.String()})
}

func floodFlags(fs *flag.FlagSet, f *FloodSettings) {
	fs.StringVar(&f.conns, "flood-conns", "300,600", "flood scenario: comma-separated `counts` of slow-body connections, one flood after the other")
	fs.StringVar(&f.transports, "flood-transports", "tcp,unix", "flood scenario: comma-separated `transports` of the agent's API: tcp (a loopback port), unix (a socket)")
	fs.StringVar(&f.bodyTimeouts, "flood-body-timeouts", "30s,1s", "flood scenario: comma-separated `durations`, the agents' --api-body-timeout, an agent each: the default 30s holds each slow body past the phase; a short one answers each 408 soon, and the flood reconnects at once")
	fs.DurationVar(&f.Phase, "flood-phase", 12*time.Second, "flood scenario: how long each phase lasts, with the flood and without it (the baseline); longer than --flood-worker-timeout")
	fs.DurationVar(&f.WorkerTimeout, "flood-worker-timeout", 5*time.Second, "flood scenario: the agents' --worker-timeout: a worker shut out this long would lose its tasks")
	fs.DurationVar(&f.Every, "flood-every", 50*time.Millisecond, "flood scenario: how often each task of the worker commits, and the worker reads its assignment")
	fs.IntVar(&f.Tasks, "flood-tasks", 4, "flood scenario: tasks of the worker (p-0 and on; the flood posts to p-0)")
}

// parseFlood checks the flood scenario's flags.
func parseFlood(f *FloodSettings) error {
	f.Conns, f.Transports, f.BodyTimeouts = nil, nil, nil
	for _, v := range strings.Split(f.conns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return fmt.Errorf("--flood-conns %q: use counts of 1 or more, like 300,600", f.conns)
		}
		f.Conns = append(f.Conns, n)
	}
	var err error
	if f.Transports, err = names("--flood-transports", f.transports, "tcp", "unix"); err != nil {
		return err
	}
	for _, v := range strings.Split(f.bodyTimeouts, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d <= 0 {
			return fmt.Errorf("--flood-body-timeouts %q: use positive durations, like 30s,1s", f.bodyTimeouts)
		}
		f.BodyTimeouts = append(f.BodyTimeouts, d)
	}
	switch {
	case f.Tasks < 1:
		return fmt.Errorf("--flood-tasks %d: use at least 1", f.Tasks)
	case f.Every <= 0:
		return errors.New("--flood-every must be positive")
	case f.WorkerTimeout <= time.Second:
		return fmt.Errorf("--flood-worker-timeout %s: use more than the 1s a worker may take between two polls", f.WorkerTimeout)
	case f.Phase <= f.WorkerTimeout:
		return fmt.Errorf("--flood-phase %s: use longer than --flood-worker-timeout %s, so that a worker the flood shut out would lose its tasks", f.Phase, f.WorkerTimeout)
	}
	return nil
}

// floodResults is what the flood scenario measured.
type floodResults struct {
	Settings Settings     `json:"settings"`
	Started  time.Time    `json:"started"`
	Load     [2]float64   `json:"loadAverage"`
	Phases   []floodPhase `json:"phases"`
	Error    string       `json:"error,omitempty"`
}

// floodPhase is one phase of an agent's run: with a flood of Conns
// connections, or without one (Conns 0, the baseline).
type floodPhase struct {
	Transport   string  `json:"transport"`
	BodyTimeout string  `json:"bodyTimeout"`
	Conns       int     `json:"floodConns"`
	Seconds     float64 `json:"seconds"`
	// Assignment and Commit are the worker's calls' latencies, in ms: its
	// reads of GET /assignment (no wait) and its tasks' commits.
	Assignment PauseStats `json:"assignment"`
	Commit     PauseStats `json:"commit"`
	// Errors counts the worker's calls that failed, FirstError names one.
	Errors     int    `json:"errors"`
	FirstError string `json:"firstError,omitempty"`
	// TaskEvents counts the worker's tasks started, stopped, restarted or
	// refused during the phase; Detached and Lost count the agent's log
	// lines that say the worker detached or was lost.
	TaskEvents int    `json:"taskEvents"`
	FirstEvent string `json:"firstEvent,omitempty"`
	Detached   int    `json:"detached"`
	Lost       int    `json:"lost"`
	// KeptTasks says that after the phase every task was still active on
	// the member at the epoch it had before the first phase, and that none
	// of the above happened.
	KeptTasks bool `json:"keptTasks"`
	// Flood is the flood's last counters.
	Flood *flood.Counts `json:"flood,omitempty"`
	// AgentCPU is the agent's CPU time over the phase's, in percent of
	// one core.
	AgentCPU float64 `json:"agentCpuPercent"`
	Load     float64 `json:"load"`
}

// runFlood runs one agent per transport and body timeout, a worker in this
// process, and for each flood size a phase without the flood and one
// with it.
func runFlood(ctx context.Context, s Settings, procs *lab.Processes, e Env) error {
	res := floodResults{Settings: s, Started: time.Now().UTC()}
	res.Load[0] = loadAverage()
	err := measureFloods(ctx, s, procs, &res, e.Stderr)
	res.Load[1] = loadAverage()
	if err != nil {
		res.Error = err.Error()
	}
	return report(s, e, res, func(w io.Writer) error { return writeFloodTable(w, res) }, err)
}

func measureFloods(ctx context.Context, s Settings, procs *lab.Processes, res *floodResults, progress io.Writer) (err error) {
	dir, err := os.MkdirTemp("", "flood-") // short: a socket's path is at most ~100 bytes
	if err != nil {
		return fmt.Errorf("flood: %w", err)
	}
	if s.Keep {
		fmt.Fprintf(progress, "bench: flood: the processes' logs are kept in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	servers, err := proc.NewNATSServers(procs.Binaries.NATSServer, filepath.Join(dir, "nats"), 1)
	if err != nil {
		return fmt.Errorf("flood: %w", err)
	}
	ns := servers[0]
	if err := ns.Start(); err != nil {
		return fmt.Errorf("flood: %w", err)
	}
	defer func() {
		if kerr := ns.Proc.Kill(); kerr != nil && err == nil {
			err = kerr
		}
	}()
	if err := ns.WaitHealthy(ctx); err != nil {
		return fmt.Errorf("flood: %w", err)
	}
	for _, transport := range s.Flood.Transports {
		for i, bt := range s.Flood.BodyTimeouts {
			run := floodRun{s: s, procs: procs, natsURL: ns.URL(), transport: transport, bodyTimeout: bt,
				dir: filepath.Join(dir, transport+"-"+strconv.Itoa(i)), group: "flood-" + transport + "-" + strconv.Itoa(i) + "-" + groupSuffix(), progress: progress}
			phases, err := run.measure(ctx)
			res.Phases = append(res.Phases, phases...)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// floodRun is one agent's part of the scenario.
type floodRun struct {
	s           Settings
	procs       *lab.Processes
	natsURL     string
	transport   string
	bodyTimeout time.Duration
	dir, group  string
	progress    io.Writer
}

// measure starts the agent and the worker, waits until the worker runs
// every task, and runs a baseline and a flood per flood size.
func (r floodRun) measure(ctx context.Context) (phases []floodPhase, err error) {
	f := r.s.Flood
	cfg := assign.DefaultConfig()
	cfg.Stateful = []string{fmt.Sprintf("p-0..%d", f.Tasks-1)}
	m, err := cluster.NewProcess(&cluster.ProcessConfig{
		Binaries: r.procs.Binaries, NATSURL: r.natsURL, Group: r.group, Config: cfg, LogLevel: r.s.AgentLevel,
		WorkerTimeout: f.WorkerTimeout, Socket: r.transport == "unix",
		AgentArgs: append([]string{"--api-body-timeout", r.bodyTimeout.String()}, r.procs.AgentArgs...), AgentEnv: r.procs.AgentEnv,
	}, "m1", r.dir)
	if err != nil {
		return nil, fmt.Errorf("flood: %w", err)
	}
	if err := m.StartAgent(ctx); err != nil {
		return nil, fmt.Errorf("flood: %w", err)
	}
	defer func() {
		if kerr := m.Agent.Kill(); kerr != nil && err == nil {
			err = kerr
		}
	}()
	w, err := startFloodWorker(m.URL(), f, filepath.Join(r.dir, "worker.log"))
	if err != nil {
		return nil, err
	}
	defer w.stop()
	epochs, err := w.waitRunning(ctx, f.Tasks)
	if err != nil {
		return nil, fmt.Errorf("flood: the worker's tasks active on %s: %w (see %s)", r.transport, err, m.Agent.LogPath)
	}
	for _, n := range f.Conns {
		for _, conns := range []int{0, n} {
			p, err := r.phase(ctx, m, w, epochs, conns)
			phases = append(phases, p)
			if err != nil {
				return phases, err
			}
		}
	}
	return phases, nil
}

// phase runs one phase: with a flood of conns connections once they are
// all open, or without one (conns 0).
func (r floodRun) phase(ctx context.Context, m *cluster.Process, w *floodWorker, epochs map[string]uint64, conns int) (floodPhase, error) {
	p := floodPhase{Transport: r.transport, BodyTimeout: r.bodyTimeout.String(), Conns: conns}
	what := "baseline"
	if conns > 0 {
		what = fmt.Sprintf("flood of %d slow bodies", conns)
	}
	fmt.Fprintf(r.progress, "bench: flood: %s, body timeout %s: %s for %s\n", r.transport, r.bodyTimeout, what, r.s.Flood.Phase)
	// The phase's calls include those made while the flood opens its
	// connections.
	mark := m.Log.Lines()
	rec := w.begin()
	cpu0, _ := cpuTime(m.Agent.Pid())
	began := time.Now()
	var fl *floodProcess
	if conns > 0 {
		var err error
		if fl, err = startFlood(ctx, r.procs.Binaries.Lab, m.Addr(), conns, filepath.Join(r.dir, fmt.Sprintf("flood-%d.log", conns))); err != nil {
			return p, err
		}
		defer fl.stop()
	}
	select {
	case <-ctx.Done():
		return p, ctx.Err()
	case <-time.After(r.s.Flood.Phase):
	}
	cpu1, _ := cpuTime(m.Agent.Pid())
	p.Seconds = time.Since(began).Seconds()
	w.begin() // the next phase's calls go elsewhere
	p.Load = loadAverage()
	p.AgentCPU = 100 * (cpu1 - cpu0).Seconds() / p.Seconds
	if fl != nil {
		c, err := fl.stop()
		if err != nil {
			return p, err
		}
		p.Flood = &c
	}
	rec.summarize(&p)
	for _, l := range m.Log.LinesAfter(mark) {
		switch {
		case strings.HasPrefix(l.Message, "worker detached"):
			p.Detached++
		case strings.HasPrefix(l.Message, "worker lost"):
			p.Lost++
		}
	}
	view, err := w.cl.Assignment(ctx, 0, 0)
	if err != nil {
		return p, fmt.Errorf("flood: the view after the phase: %w", err)
	}
	kept := 0
	for _, t := range view.Tasks {
		if t.Role == api.RoleActive && epochs[t.ID] == t.Epoch {
			kept++
		}
	}
	p.KeptTasks = kept == len(epochs) && p.TaskEvents == 0 && p.Lost == 0
	return p, nil
}

// floodProcess is a running 'handoff-lab flood' and its counters.
type floodProcess struct {
	p    *proc.Process
	log  proc.LineReader
	mu   sync.Mutex
	last flood.Counts
}

// startFlood starts a flood of conns connections on addr and waits until
// it has opened them all.
func startFlood(ctx context.Context, bin, addr string, conns int, logPath string) (*floodProcess, error) {
	f := &floodProcess{p: &proc.Process{Name: "flood", Path: bin, LogPath: logPath,
		Args: []string{"flood", "--target", addr, "--conns", strconv.Itoa(conns), "--report", "100ms"}}}
	f.log = proc.LineReader{Path: logPath, Parse: func(line []byte) error {
		var c flood.Counts
		if err := json.Unmarshal(line, &c); err != nil {
			return err
		}
		f.mu.Lock()
		f.last = c
		f.mu.Unlock()
		return nil
	}}
	if err := f.p.Start(); err != nil {
		return nil, fmt.Errorf("flood: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, floodStartWait)
	defer cancel()
	err := poll.Until(ctx, 50*time.Millisecond, func() error {
		select {
		case <-f.p.Exited():
			return poll.Permanent(fmt.Errorf("exited: %v", f.p.ExitErr()))
		default:
		}
		if c := f.counts(); c.Connects < int64(conns) {
			return fmt.Errorf("%d of %d connections made", c.Connects, conns)
		}
		return nil
	})
	if err != nil {
		_ = f.p.Kill()
		return nil, fmt.Errorf("flood: start a flood of %d: %w (see %s)", conns, err, logPath)
	}
	return f, nil
}

func (f *floodProcess) counts() flood.Counts {
	_ = f.log.Refresh() // a log not written yet has nothing to read
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// stop stops the flood and returns its last counters; once stopped, it
// does nothing.
func (f *floodProcess) stop() (flood.Counts, error) {
	if !f.p.Running() {
		return f.counts(), nil
	}
	if err := f.p.Terminate(); err != nil {
		return f.counts(), fmt.Errorf("flood: %w", err)
	}
	if err := f.p.Wait(30 * time.Second); err != nil {
		_ = f.p.Kill()
		return f.counts(), fmt.Errorf("flood: %w", err)
	}
	return f.counts(), nil
}

// floodWorker is a worker in this process (client.Run) whose tasks commit
// every Every, and which reads its assignment as often; it times each of
// those calls into the current phase's record.
type floodWorker struct {
	cl     *client.Client
	cancel context.CancelFunc
	done   sync.WaitGroup
	logf   *os.File
	cur    atomic.Pointer[floodRecord]

	mu     sync.Mutex
	epochs map[string]uint64 // the tasks started, at the epoch of their last start
}

// floodRecord is what the worker saw in one phase.
type floodRecord struct {
	mu                 sync.Mutex
	assignment, commit []time.Duration
	errors             int
	firstError         string
	events             int
	firstEvent         string
}

func (r *floodRecord) call(commit bool, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errors++
		if r.firstError == "" {
			r.firstError = err.Error()
		}
		return
	}
	if commit {
		r.commit = append(r.commit, d)
	} else {
		r.assignment = append(r.assignment, d)
	}
}

func (r *floodRecord) event(ev client.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events++
	if r.firstEvent == "" {
		r.firstEvent = fmt.Sprintf("%s %s at epoch %d", ev.Type, ev.Task, ev.Epoch)
		if ev.Err != nil {
			r.firstEvent += ": " + ev.Err.Error()
		}
	}
}

func (r *floodRecord) summarize(p *floodPhase) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p.Assignment, p.Commit = PauseStatsOf(r.assignment), PauseStatsOf(r.commit)
	p.Errors, p.FirstError, p.TaskEvents, p.FirstEvent = r.errors, r.firstError, r.events, r.firstEvent
}

func startFloodWorker(url string, f FloodSettings, logPath string) (*floodWorker, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("flood: worker log: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &floodWorker{cl: client.New(url), cancel: cancel, logf: logf, epochs: map[string]uint64{}}
	w.cur.Store(&floodRecord{})
	opts := client.RunOptions{Logger: zerolog.New(logf).With().Timestamp().Logger(), OnEvent: w.onEvent}
	w.done.Go(func() { _ = client.Run(ctx, w.cl, w.task(f.Every), opts) })
	w.done.Go(func() { w.readAssignment(ctx, f.Every) })
	return w, nil
}

// begin starts a new phase's record and returns it.
func (w *floodWorker) begin() *floodRecord {
	r := &floodRecord{}
	w.cur.Store(r)
	return r
}

func (w *floodWorker) onEvent(ev client.Event) {
	switch ev.Type {
	case client.EventStart:
		w.mu.Lock()
		w.epochs[ev.Task] = ev.Epoch
		w.mu.Unlock()
	case client.EventPrepare, client.EventDiscard, client.EventCommit:
		return
	}
	w.cur.Load().event(ev)
}

// task is the worker's task function: a commit of one key and the
// checkpoint every every, until the task stops.
func (w *floodWorker) task(every time.Duration) client.TaskFunc {
	return func(ctx context.Context, t client.Task) error {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			rec, began := w.cur.Load(), time.Now()
			n := strconv.AppendInt(nil, int64(i), 10)
			_, err := t.Commit(ctx, []api.KV{{Key: []byte("n"), Value: n}}, nil, n)
			if ctx.Err() != nil {
				return nil
			}
			rec.call(true, time.Since(began), err)
			if errors.Is(err, api.ErrNotOwner) {
				return err
			}
		}
	}
}

// readAssignment reads the worker's assignment every every, as a worker
// that checks its view between batches would.
func (w *floodWorker) readAssignment(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rec, began := w.cur.Load(), time.Now()
		_, err := w.cl.Assignment(ctx, 0, 0)
		if ctx.Err() != nil {
			return
		}
		rec.call(false, time.Since(began), err)
	}
}

// waitRunning waits until the worker runs tasks tasks, each active on the
// member, and returns their epochs.
func (w *floodWorker) waitRunning(ctx context.Context, tasks int) (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, cluster.StartWait)
	defer cancel()
	var epochs map[string]uint64
	err := poll.Until(ctx, 50*time.Millisecond, func() error {
		v, err := w.cl.Assignment(ctx, 0, 0)
		if err != nil {
			return err
		}
		epochs = map[string]uint64{}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, t := range v.Tasks {
			if t.Role == api.RoleActive && w.epochs[t.ID] == t.Epoch {
				epochs[t.ID] = t.Epoch
			}
		}
		if len(epochs) < tasks {
			return fmt.Errorf("%d of %d tasks active and started", len(epochs), tasks)
		}
		return nil
	})
	return epochs, err
}

func (w *floodWorker) stop() {
	w.cancel()
	w.done.Wait()
	_ = w.logf.Close()
}

// writeFloodTable prints one row per phase.
func writeFloodTable(w io.Writer, r floodResults) error {
	f := r.Settings.Flood
	fmt.Fprintf(w, "flood: a worker of %d tasks (a commit per task and a read of GET /assignment every %s) beside a flood of slow bodies\n",
		f.Tasks, f.Every)
	fmt.Fprintf(w, "(each connection: POST /tasks/p-0/commit, Content-Length: 1000000, a byte a second, again at once when answered or closed),\n")
	fmt.Fprintf(w, "phases of %s, --worker-timeout %s; load %.2f → %.2f\n\n", f.Phase, f.WorkerTimeout, r.Load[0], r.Load[1])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "api\tbody timeout\tflood\tGET /assignment ms p50/p99/max\tcommit ms p50/p99/max\tcalls\terrors\tkept tasks\tdetached/lost\tflood conns/408/closed\tagent CPU\tload")
	for _, p := range r.Phases {
		fl := "-"
		if p.Flood != nil {
			fl = fmt.Sprintf("%d/%d/%d", p.Flood.Connects, p.Flood.TimedOut, p.Flood.Closed)
		}
		floodCell := "none"
		if p.Conns > 0 {
			floodCell = strconv.Itoa(p.Conns)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%d/%d\t%s\t%.0f%%\t%.2f\n", p.Transport, p.BodyTimeout, floodCell,
			msTriple(p.Assignment), msTriple(p.Commit), p.Assignment.Count+p.Commit.Count, p.Errors, verdict(p.KeptTasks),
			p.Detached, p.Lost, fl, p.AgentCPU, p.Load)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Phases {
		if p.FirstError != "" || p.FirstEvent != "" {
			fmt.Fprintf(w, "%s, body timeout %s, flood %d: first error %q, first task event %q\n", p.Transport, p.BodyTimeout, p.Conns, p.FirstError, p.FirstEvent)
		}
	}
	if r.Error != "" {
		fmt.Fprintf(w, "error: %s\n", r.Error)
	}
	return nil
}

// msTriple prints p50/p99/max in ms.
func msTriple(s PauseStats) string {
	if s.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f/%.1f/%.1f", s.P50, s.P99, s.Max)
}

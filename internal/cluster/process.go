package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/proc"
)

// ProcessConfig is how the members of one group run as processes: the
// programs, the NATS servers, and the settings every member's `handoff
// agent` and counter worker are started with.
type ProcessConfig struct {
	Binaries proc.Binaries
	// NATSURL is the NATS servers' client URLs, comma-separated.
	NATSURL string
	Group   string
	// Config is the group's config; every agent gets all of it as flags.
	Config assign.Config
	// Replicas is the agents' --replicas, LogLevel their --log-level and
	// WorkerTimeout their --worker-timeout; zero leaves the agent's default.
	Replicas      int
	LogLevel      string
	WorkerTimeout time.Duration
	// Socket makes every agent's API listen on a Unix socket in its
	// member's directory instead of a loopback port (Listen).
	Socket bool
	// AgentArgs are added to every agent's command line, AgentEnv to its
	// environment: for A/B runs of a setting.
	AgentArgs []string
	AgentEnv  []string
	// Batch, MaxDelay and PollWait are the workers' --batch, --max-delay
	// and --poll-wait, NoCache their --cache=false; zero leaves the
	// worker's default.
	Batch    int
	MaxDelay time.Duration
	PollWait time.Duration
	NoCache  bool
}

// Process is one member run as the deployment runs one: a `handoff agent`
// process and an examples/counter worker process that talks to it over
// its API, with a directory (agent.log, worker.log, events.jsonl and the
// agent's data) that survives restarts. The agent binds a fresh port at
// each start and logs it; the worker is pointed at the agent's current
// run. Its methods are for one goroutine at a time, except those of its
// processes and logs, which are safe for concurrent use.
type Process struct {
	ID     string
	Dir    string
	Agent  *proc.Process
	Worker *proc.Process
	Events *EventLog
	Log    *AgentLog

	cfg       *ProcessConfig
	workerLog *workerLog
	api       string // the agent's API address in its current run
	// stopped says the member was stopped on purpose (kill, terminate,
	// leave): its processes are expected to be gone.
	stopped bool
	// workerUp says the worker was started since the agent last was.
	workerUp      bool
	workerStarted int // the worker log's starts before the worker's last start
}

// NewProcess prepares member id in dir; Start starts it. cfg is shared by
// the group's members and must not change after.
func NewProcess(cfg *ProcessConfig, id, dir string) (*Process, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create directory of %s: %w", id, err)
	}
	m := &Process{
		ID:     id,
		Dir:    dir,
		cfg:    cfg,
		Agent:  &proc.Process{Name: "agent-" + id, Path: cfg.Binaries.Handoff, LogPath: filepath.Join(dir, "agent.log"), Env: cfg.AgentEnv},
		Worker: &proc.Process{Name: "worker-" + id, Path: cfg.Binaries.Counter, LogPath: filepath.Join(dir, "worker.log")},
		Events: NewEventLog(id, filepath.Join(dir, "events.jsonl")),
		Log:    NewAgentLog(id, filepath.Join(dir, "agent.log")),
	}
	m.Agent.Args = m.agentArgs()
	m.workerLog = newWorkerLog(m.Worker.LogPath)
	return m, nil
}

// agentArgs is the member's `handoff agent` command line: the group config
// as flags, JSON logs, an API on a free port or a socket.
func (m *Process) agentArgs() []string {
	o, c := m.cfg, m.cfg.Config
	args := []string{"agent",
		"--nats", o.NATSURL,
		"--group", o.Group,
		"--member-id", m.ID,
		"--listen", Listen(m.Dir, m.cfg.Socket),
		"--data-dir", filepath.Join(m.Dir, "data"),
		"--log-format", "json",
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
	if o.LogLevel != "" {
		args = append(args, "--log-level", o.LogLevel)
	}
	if o.Replicas > 0 {
		args = append(args, "--replicas", strconv.Itoa(o.Replicas))
	}
	if o.WorkerTimeout > 0 {
		args = append(args, "--worker-timeout", o.WorkerTimeout.String())
	}
	return append(args, o.AgentArgs...)
}

// workerArgs is the counter's command line against the agent's current run.
func (m *Process) workerArgs() []string {
	o := m.cfg
	args := []string{
		"--sidecar", m.URL(),
		"--nats", o.NATSURL,
		"--group", o.Group,
		"--events", filepath.Join(m.Dir, "events.jsonl"),
	}
	if o.Batch > 0 {
		args = append(args, "--batch", strconv.Itoa(o.Batch))
	}
	if o.MaxDelay > 0 {
		args = append(args, "--max-delay", o.MaxDelay.String())
	}
	if o.PollWait > 0 {
		args = append(args, "--poll-wait", o.PollWait.String())
	}
	if o.NoCache {
		args = append(args, "--cache=false")
	}
	return args
}

// StartWait bounds how long a process may take to start: the agent to
// serve its API, the worker to connect.
const StartWait = 60 * time.Second

// healthTimeout bounds one ask of an agent's /healthz, so that a paused
// agent does not hang a start.
const healthTimeout = 5 * time.Second

// Start starts the agent, then the worker, and waits until both have
// started (StartAgent, StartWorker).
func (m *Process) Start(ctx context.Context) error {
	if err := m.StartAgent(ctx); err != nil {
		return err
	}
	return m.StartWorker()
}

// StartAgent starts the agent and waits until it serves its API (its log
// names the address, and /healthz answers), at most StartWait. The
// member's worker is not started.
func (m *Process) StartAgent(ctx context.Context) error {
	m.stopped, m.workerUp = false, false
	m.Log.ForgetAPI()
	if err := m.Agent.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, StartWait)
	defer cancel()
	var addr string
	err := poll.Until(ctx, 10*time.Millisecond, func() error {
		select {
		case <-m.Agent.Exited():
			return poll.Permanent(fmt.Errorf("exited while starting: %v", m.Agent.ExitErr()))
		default:
		}
		if addr = m.Log.API(); addr == "" {
			return errors.New("it has not logged its API address yet")
		}
		return healthz(ctx, APIURL(addr))
	})
	if err != nil {
		_ = m.Agent.Kill()
		return fmt.Errorf("start the agent of %s: %w (see %s)", m.ID, err, m.Agent.LogPath)
	}
	m.api = addr
	return nil
}

// healthz asks the agent at url whether it is up.
func healthz(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	base, hc := url, &http.Client{Transport: client.NewTransport(url)}
	if _, socket := api.SocketPath(url); socket {
		base = "http://localhost"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	hc.CloseIdleConnections()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %s", resp.Status)
	}
	return nil
}

// StartWorker starts the worker against the agent's current run and waits
// until it has logged that it is connected to NATS and follows the agent,
// at most StartWait.
func (m *Process) StartWorker() error {
	if err := m.SpawnWorker(); err != nil {
		return err
	}
	return m.waitWorker()
}

// SpawnWorker is StartWorker without the wait.
func (m *Process) SpawnWorker() error {
	m.stopped, m.workerUp = false, true
	m.Worker.Args = m.workerArgs()
	m.workerStarted = m.workerLog.starts()
	return m.Worker.Start()
}

// waitWorker waits until the worker started last has logged that it started.
func (m *Process) waitWorker() error {
	err := poll.Within(StartWait, 50*time.Millisecond, func() error {
		select {
		case <-m.Worker.Exited():
			return poll.Permanent(fmt.Errorf("worker %s exited while starting: %v", m.ID, m.Worker.ExitErr()))
		default:
		}
		if m.workerLog.starts() == m.workerStarted {
			return errors.New("worker has not logged that it started")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("start the worker of %s: %w (see %s)", m.ID, err, m.Worker.LogPath)
	}
	return nil
}

// Addr is the agent's API address in its current run (host:port, or
// unix:PATH).
func (m *Process) Addr() string { return m.api }

// URL is the agent's API in its current run, as a client takes it.
func (m *Process) URL() string { return APIURL(m.api) }

// Client is a client of the agent's API in its current run.
func (m *Process) Client() *client.Client { return client.New(m.URL()) }

// Leave calls POST /leave on the agent.
func (m *Process) Leave(ctx context.Context) (api.LeaveStatus, error) {
	m.stopped = true
	return m.Client().Leave(ctx)
}

// Kill SIGKILLs the agent, then the worker, as a lost machine would.
func (m *Process) Kill() error {
	m.stopped = true
	return errors.Join(m.Agent.Kill(), m.Worker.Kill())
}

// KillAgent SIGKILLs the agent only; the worker runs on against an agent
// that is gone, until it is killed or restarted.
func (m *Process) KillAgent() error {
	m.stopped = true
	return m.Agent.Kill()
}

// KillWorker SIGKILLs the worker only, as a crashed worker container; the
// agent keeps running. StartWorker starts it again.
func (m *Process) KillWorker() error {
	m.workerUp = false
	return m.Worker.Kill()
}

// Pause SIGSTOPs the agent and the worker; Resume SIGCONTs them.
func (m *Process) Pause() error { return errors.Join(m.Agent.Pause(), m.Worker.Pause()) }

// Resume continues a paused member.
func (m *Process) Resume() error { return errors.Join(m.Agent.Resume(), m.Worker.Resume()) }

// PauseWorker SIGSTOPs the worker only, as a hung worker; the agent keeps
// running. ResumeWorker SIGCONTs it.
func (m *Process) PauseWorker() error { return m.Worker.Pause() }

// ResumeWorker continues a worker paused by PauseWorker.
func (m *Process) ResumeWorker() error { return m.Worker.Resume() }

// Terminate sends SIGTERM to the agent only: it leaves the group gracefully
// (its worker releases each task as it is revoked) and exits, and the
// worker exits when the agent says shutdown.
func (m *Process) Terminate() error {
	m.stopped = true
	return m.Agent.Terminate()
}

// Expected returns the member's processes that should be running: none
// once it was stopped on purpose, else the agent and, once started, the
// worker.
func (m *Process) Expected() []*proc.Process {
	switch {
	case m.stopped:
		return nil
	case m.workerUp:
		return []*proc.Process{m.Agent, m.Worker}
	}
	return []*proc.Process{m.Agent}
}

// Running reports whether the agent or the worker runs.
func (m *Process) Running() bool { return m.Agent.Running() || m.Worker.Running() }

// WaitExited waits until both processes have exited by themselves.
func (m *Process) WaitExited(timeout time.Duration) error {
	return poll.Within(timeout, 50*time.Millisecond, func() error {
		var running []string
		for _, p := range []*proc.Process{m.Agent, m.Worker} {
			if p.Running() {
				running = append(running, p.Name)
			}
		}
		if len(running) > 0 {
			return fmt.Errorf("still running: %v", running)
		}
		return nil
	})
}

// APIURL turns an API address (host:port, or unix:PATH) into the URL a
// client takes.
func APIURL(addr string) string {
	if _, socket := api.SocketPath(addr); socket {
		return addr
	}
	return "http://" + addr
}

// Listen is the address a member's API listens on: a free loopback port,
// or with socket the Unix socket api.sock in the member's directory dir.
func Listen(dir string, socket bool) string {
	if socket {
		return api.UnixPrefix + filepath.Join(dir, "api.sock")
	}
	return "127.0.0.1:0"
}

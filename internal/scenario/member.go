package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
)

// Member is one member of the group: a handoff agent process and its
// counter worker process, with a data directory that survives restarts.
// The agent binds a fresh port at each start (it logs it); the worker is
// started once the agent serves, and pointed at it.
type Member struct {
	ID     string
	Dir    string
	Agent  *Process
	Worker *Process
	Events *EventLog
	Log    *AgentLog

	workerLog *workerLog
	h         *Harness
	agentArgs []string
	api       string // host:port of the current run
	// stopped says the scenario stopped the member (kill, terminate,
	// leave): its processes are expected to be gone.
	stopped bool
	// workerUp says the worker was started since the agent last was.
	workerUp bool
}

// newMember prepares member id; Start starts it.
func (h *Harness) newMember(id string) (*Member, error) {
	dir := filepath.Join(h.Dir, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create directory of %s: %w", id, err)
	}
	o := h.opts
	args := []string{"agent",
		"--nats", h.NATSURL(),
		"--group", o.Group,
		"--member-id", id,
		"--listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(dir, "data"),
		"--tasks", o.Stateful,
		"--handover", o.Handover,
		"--acceptable-lag", strconv.FormatUint(o.AcceptableLag, 10),
		"--max-learners-per-member", strconv.Itoa(o.MaxLearnersPerMember),
		"--session-timeout", o.SessionTimeout.String(),
		"--release-timeout", o.ReleaseTimeout.String(),
		"--leave-timeout", o.LeaveTimeout.String(),
		"--stable-max-wait", o.StableMaxWait.String(),
		"--replicas", strconv.Itoa(o.Replicas),
		"--log-format", "json",
	}
	if o.Stateless != "" {
		args = append(args, "--stateless-tasks", o.Stateless)
	}
	if o.Standbys > 0 {
		args = append(args, "--standbys", strconv.Itoa(o.Standbys))
	}
	if o.WorkerTimeout > 0 {
		args = append(args, "--worker-timeout", o.WorkerTimeout.String())
	}
	m := &Member{
		ID:        id,
		Dir:       dir,
		h:         h,
		agentArgs: args,
		Agent:     &Process{Name: "agent-" + id, Path: h.bins.Handoff, Args: args, LogPath: filepath.Join(dir, "agent.log")},
		Events:    newEventLog(id, filepath.Join(dir, "events.jsonl")),
		Log:       newAgentLog(id, filepath.Join(dir, "agent.log")),
	}
	m.Worker = &Process{Name: "worker-" + id, Path: h.bins.Counter, LogPath: filepath.Join(dir, "worker.log")}
	m.workerLog = newWorkerLog(m.Worker.LogPath)
	return m, nil
}

// Start starts the agent, then the worker (StartAgent, StartWorker).
func (m *Member) Start() error {
	if err := m.StartAgent(); err != nil {
		return err
	}
	return m.StartWorker()
}

// StartAgent starts the agent and waits until it serves its API. The
// member's worker is not started.
func (m *Member) StartAgent() error {
	m.stopped, m.workerUp = false, false
	m.Log.forgetAPI()
	if err := m.Agent.Start(); err != nil {
		return err
	}
	var api string
	err := poll(60*time.Second, func() error {
		select {
		case <-m.Agent.Exited():
			return permanent(fmt.Errorf("agent %s exited while starting: %v", m.ID, m.Agent.ExitErr()))
		default:
		}
		if api = m.Log.API(); api == "" {
			return errors.New("agent has not logged its API address yet")
		}
		resp, err := httpClient.Get("http://" + api + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("start the agent of %s: %w (see %s)", m.ID, err, m.Agent.LogPath)
	}
	m.api = api
	return nil
}

// StartWorker starts the worker against the agent's current run and waits
// until it is connected to NATS and follows the agent.
func (m *Member) StartWorker() error {
	m.stopped, m.workerUp = false, true
	m.Worker.Args = []string{
		"--sidecar", "http://" + m.api,
		"--nats", m.h.NATSURL(),
		"--group", m.h.opts.Group,
		"--events", filepath.Join(m.Dir, "events.jsonl"),
		"--batch", strconv.Itoa(m.h.opts.Batch),
		"--max-delay", m.h.opts.MaxDelay.String(),
	}
	if m.h.opts.PollWait > 0 {
		m.Worker.Args = append(m.Worker.Args, "--poll-wait", m.h.opts.PollWait.String())
	}
	before := m.workerLog.starts()
	if err := m.Worker.Start(); err != nil {
		return err
	}
	err := poll(60*time.Second, func() error {
		select {
		case <-m.Worker.Exited():
			return permanent(fmt.Errorf("worker %s exited while starting: %v", m.ID, m.Worker.ExitErr()))
		default:
		}
		if m.workerLog.starts() == before {
			return errors.New("worker has not logged that it started")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("start the worker of %s: %w (see %s)", m.ID, err, m.Worker.LogPath)
	}
	return nil
}

// URL is the agent's API base URL in its current run.
func (m *Member) URL() string { return "http://" + m.api }

// Client is a client of the agent's API in its current run.
func (m *Member) Client() *client.Client { return client.New(m.URL()) }

// Leave calls POST /leave on the agent.
func (m *Member) Leave(ctx context.Context) (api.LeaveStatus, error) {
	m.stopped = true
	return m.Client().Leave(ctx)
}

// Kill SIGKILLs the agent and the worker, as a lost machine would.
func (m *Member) Kill() error {
	m.stopped = true
	return errors.Join(m.Agent.Kill(), m.Worker.Kill())
}

// KillAgent SIGKILLs the agent only; the worker runs on against an agent
// that is gone, until the scenario kills or restarts it.
func (m *Member) KillAgent() error {
	m.stopped = true
	return m.Agent.Kill()
}

// Pause SIGSTOPs the agent and the worker; Resume SIGCONTs them.
func (m *Member) Pause() error { return errors.Join(m.Agent.Pause(), m.Worker.Pause()) }

// Resume continues a paused member.
func (m *Member) Resume() error { return errors.Join(m.Agent.Resume(), m.Worker.Resume()) }

// Terminate sends SIGTERM to the agent only: it leaves the group gracefully
// (its worker releases each task as it is revoked) and exits, and the
// worker exits when the agent says shutdown.
func (m *Member) Terminate() error {
	m.stopped = true
	return m.Agent.Terminate()
}

// expected returns the member's processes that should be running.
func (m *Member) expected() []*Process {
	switch {
	case m.stopped:
		return nil
	case m.workerUp:
		return []*Process{m.Agent, m.Worker}
	}
	return []*Process{m.Agent}
}

// Running reports whether the agent or the worker runs.
func (m *Member) Running() bool { return m.Agent.Running() || m.Worker.Running() }

// WaitExited waits until both processes have exited by themselves.
func (m *Member) WaitExited(timeout time.Duration) error {
	return poll(timeout, func() error {
		var running []string
		for _, p := range []*Process{m.Agent, m.Worker} {
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

// checkLeft checks a member whose leave through the API has completed: its
// agent says shutdown, its worker exits by itself with status 0, and its
// agent exits with status 0 — by itself, or promptly at SIGTERM (the agent
// keeps serving after an API leave so that a Kubernetes preStop hook
// polling it sees the shutdown; see cmd/handoff TestKubernetesPreStop).
func (h *Harness) checkLeft(m *Member) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m.Agent.Running() {
		st, err := m.Client().LeaveStatus(ctx)
		if err != nil || !st.Shutdown {
			h.t.Errorf("%s after its leave: GET /leave = %+v, %v; want shutdown", m.ID, st, err)
		}
	}
	if err := m.Worker.Wait(30 * time.Second); err != nil {
		h.t.Errorf("%s's worker after its leave: %v", m.ID, err)
	} else if err := m.Worker.ExitErr(); err != nil {
		h.t.Errorf("%s's worker exited with %v after its leave, want status 0", m.ID, err)
	}
	if m.Agent.Running() {
		h.Logf("%s's agent still serves after the leave; SIGTERM", m.ID)
		if err := m.Agent.Terminate(); err != nil {
			h.t.Error(err)
		}
	}
	if err := m.Agent.Wait(30 * time.Second); err != nil {
		h.t.Errorf("%s's agent after its leave: %v", m.ID, err)
	} else if err := m.Agent.ExitErr(); err != nil {
		h.t.Errorf("%s's agent exited with %v after its leave, want status 0", m.ID, err)
	}
}

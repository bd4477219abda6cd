package scenario

import (
	"context"
	"path/filepath"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/internal/cluster"
)

// processConfig is how the scenario's members run: o's group config and
// its agents' and workers' settings.
func processConfig(o Options, bins Binaries, natsURL string) *cluster.ProcessConfig {
	c := assign.DefaultConfig()
	c.Stateful = []string{o.Stateful}
	if o.Stateless != "" {
		c.Stateless = []string{o.Stateless}
	}
	c.Handover = assign.Mode(o.Handover)
	c.AcceptableLag = o.AcceptableLag
	c.MaxLearnersPerMember = o.MaxLearnersPerMember
	c.SessionTimeout = assign.Duration(o.SessionTimeout)
	c.ReleaseTimeout = assign.Duration(o.ReleaseTimeout)
	c.LeaveTimeout = assign.Duration(o.LeaveTimeout)
	c.StableMaxWait = assign.Duration(o.StableMaxWait)
	c.Standbys = o.Standbys
	return &cluster.ProcessConfig{
		Binaries:      bins,
		NATSURL:       natsURL,
		Group:         o.Group,
		Config:        c,
		Replicas:      o.Replicas,
		WorkerTimeout: o.WorkerTimeout,
		Batch:         o.Batch,
		MaxDelay:      o.MaxDelay,
		PollWait:      o.PollWait,
	}
}

// newMember prepares member id; Start starts it.
func (h *Harness) newMember(id string) (*Member, error) {
	return cluster.NewProcess(h.procs, id, filepath.Join(h.Dir, id))
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

package scenario

import (
	"context"
	"testing"
	"time"
)

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

// TestScaleUpAndLeave grows a loaded group from 3 to 4 members and shrinks
// it back with POST /leave, in both hand-over modes. Every move is planned:
// no activation replays anything, no task has two owners at once, and the
// member that left exits by itself (agent and worker) once told shutdown.
func TestScaleUpAndLeave(t *testing.T) {
	skipShort(t)
	for _, mode := range []string{"eager", "stable"} {
		t.Run(mode, func(t *testing.T) {
			o := DefaultOptions()
			o.Handover = mode
			h := New(t, o)
			h.Start(3)
			mark := h.Mark()

			h.AddMember("m4")
			h.WaitSettled(90*time.Second, "m1", "m2", "m3", "m4")
			h.WaitCommitting(60*time.Second, 3)

			leaver := h.Member("m2")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := leaver.Leave(ctx); err != nil {
				t.Fatalf("POST /leave on m2: %v", err)
			}
			h.Logf("m2 leaving")
			h.WaitSettled(90*time.Second, "m1", "m3", "m4")
			h.checkLeft(leaver)
			h.WaitCommitting(60*time.Second, 3)
			h.Verify(Expect{Planned: true, Mark: mark})
		})
	}
}

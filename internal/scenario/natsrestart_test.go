package scenario

import (
	"context"
	"testing"
	"time"
)

// TestNATSRestartDuringHandoff kills the nats-server (-9) in the middle of
// hand-offs — at the moment the leader publishes a generation with a
// learner to catch up or a revoke pending, as a fourth member joins and then as a member leaves
// (SIGTERM) — and restarts it on the same port and store each time.
// Agents, workers and the generator reconnect (the newcomer's worker starts
// once NATS is back: the example worker, like the agent, exits if NATS is
// unreachable when it starts); the hand-offs finish (by
// release, or by release timeout and fencing), the leaving member exits,
// and nothing acknowledged is lost.
func TestNATSRestartDuringHandoff(t *testing.T) {
	skipShort(t)
	o := DefaultOptions()
	o.MaxLearnersPerMember = 1 // hand-offs one at a time: a longer window
	h := New(t, o)
	h.Start(3)
	h.WaitCommitting(60*time.Second, 20) // a changelog for the learners to replay
	mark := h.Mark()
	n := h.NATS[0]
	kill := func(string) {
		if err := n.Proc.Kill(); err != nil {
			t.Errorf("kill nats-server: %v", err)
		}
	}
	restart := func(inFlight string) {
		h.Logf("killed nats-server with %s", inFlight)
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := n.WaitHealthy(ctx); err != nil {
			t.Fatal(err)
		}
		h.Logf("nats-server restarted")
	}

	// During a scale-up: the newcomer's agent learns; its worker starts
	// once NATS is back (a worker cannot start without NATS).
	tr := h.OnMoving("a hand-off to m4 in flight", kill)
	m4 := h.AddAgent("m4")
	restart(tr.Wait(h, 60*time.Second))
	h.WaitJetStream(60 * time.Second)
	h.StartWorker(m4)
	h.WaitSettled(120*time.Second, "m1", "m2", "m3", "m4")
	h.WaitCommitting(60*time.Second, 10)

	// During a leave.
	leaver := h.Member("m4")
	tr = h.OnMoving("a hand-off from m4 in flight", kill)
	if err := leaver.Terminate(); err != nil {
		t.Fatal(err)
	}
	restart(tr.Wait(h, 60*time.Second))
	if err := leaver.WaitExited(120 * time.Second); err != nil {
		t.Errorf("m4 after SIGTERM: %v", err)
	}
	h.WaitSettled(120*time.Second, "m1", "m2", "m3")
	h.WaitCommitting(60*time.Second, 3)
	h.Verify(Expect{Mark: mark})
}

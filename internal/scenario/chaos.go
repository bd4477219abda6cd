package scenario

import (
	"context"
	"time"
)

// settleTimeout bounds how long the group may take to settle after a
// fault: a failover (session timeout, restore), a NATS restart, a leave.
const settleTimeout = 2 * time.Minute

// Inject injects fault f, then its recovery (a restart, SIGCONT) after
// f.Delay, then waits until the group has settled over running (the
// members running after f) if f.Settle says so. It fails the test if a
// process cannot be started or stopped, or the group does not settle.
func (h *Harness) Inject(f Fault, running []string) {
	h.t.Helper()
	h.Logf("fault %d (seed %d): %s", f.N, f.Seed, f)
	m := h.members[f.Member] // nil for NATS and rolling restarts, and a new member's join
	switch f.Kind {
	case FaultKillMember:
		h.outage(f, m.Kill, func() { h.Restart(m) })
	case FaultKillAgent:
		h.outage(f, m.KillAgent, func() {
			// The worker points at the dead agent's port: it goes with it.
			h.must(m.Worker.Kill())
			h.Restart(m)
		})
	case FaultKillWorker:
		h.outage(f, m.KillWorker, func() { h.StartWorker(m) })
	case FaultPause:
		h.outage(f, m.Pause, func() { h.must(m.Resume()) })
	case FaultNATS:
		h.restartNATS(f.Delay)
	case FaultLeave:
		h.leave(m)
	case FaultJoin:
		if m != nil {
			h.Restart(m)
		} else {
			h.AddMember(f.Member)
		}
	case FaultTerminate:
		h.terminateAndRestart(m)
	case FaultRolling:
		for _, id := range running {
			h.terminateAndRestart(h.Member(id))
			h.WaitSettled(settleTimeout, running...)
		}
	default:
		h.t.Fatalf("fault %d: unknown kind %q", f.N, f.Kind)
	}
	if f.Settle {
		h.WaitSettled(settleTimeout, running...)
	}
}

// outage stops part of a member with stop, lets the outage last f.Delay
// and ends it with end.
func (h *Harness) outage(f Fault, stop func() error, end func()) {
	h.t.Helper()
	h.must(stop())
	hold(f.Delay)
	end()
}

// must fails the test on err.
func (h *Harness) must(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

// hold lets a fault last d. It is the schedule's own timing (how long a
// member stays dead or frozen), not a wait for something to happen.
func hold(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}

// restartNATS SIGKILLs the (single) nats-server and starts it again on the
// same port and store after down.
func (h *Harness) restartNATS(down time.Duration) {
	h.t.Helper()
	n := h.NATS[0]
	h.must(n.Proc.Kill())
	hold(down)
	h.must(n.Start())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h.must(n.WaitHealthy(ctx))
	h.Logf("nats-server restarted (pid %d)", n.Proc.Pid())
}

// leave makes m leave through POST /leave and waits until its worker has
// exited by itself with status 0 (its agent is then SIGTERMed, as checkLeft
// does). A leave hands every task over first, so it may take up to the
// leave timeout.
func (h *Harness) leave(m *Member) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := m.Leave(ctx); err != nil {
		h.t.Fatalf("POST /leave on %s: %v", m.ID, err)
	}
	if err := m.Worker.Wait(h.opts.LeaveTimeout + 30*time.Second); err != nil {
		h.t.Fatalf("%s's worker after its leave: %v", m.ID, err)
	}
	h.checkLeft(m)
	h.Logf("%s left", m.ID)
}

// terminateAndRestart SIGTERMs m's agent, waits until the agent and the
// worker have exited with status 0 after their graceful leave, and starts
// them again with the same data dir.
func (h *Harness) terminateAndRestart(m *Member) {
	h.t.Helper()
	h.must(m.Terminate())
	if err := m.WaitExited(h.opts.LeaveTimeout + 30*time.Second); err != nil {
		h.t.Fatalf("%s after SIGTERM: %v", m.ID, err)
	}
	for _, p := range []*Process{m.Agent, m.Worker} {
		if err := p.ExitErr(); err != nil {
			h.t.Errorf("%s exited with %v after SIGTERM, want status 0", p.Name, err)
		}
	}
	h.Restart(m)
}

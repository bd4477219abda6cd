// Package scenario runs handoff as real OS processes on loopback — a
// nats-server (one node or a three-node JetStream cluster), handoff agents
// and examples/counter workers — under continuous input, injects faults
// (SIGKILL, SIGSTOP/SIGCONT, SIGTERM, restarts, POST /leave, NATS restarts)
// and checks afterwards, from the changelog and the workers' event logs,
// what handoff promises: one writer per task, no acknowledged commit lost,
// exact state, and no planned move that paused a task for a restore.
//
// A scenario reads:
//
//	h := New(t, DefaultOptions())   // builds the binaries once, starts NATS
//	h.Start(3)                      // m1..m3 and the input; waits until settled and committing
//	mark := h.Mark()                // judge only what happens from here on
//	h.AddMember("m4")               // or Member(id).Kill/Pause/Resume/Terminate/Leave, Restart, NATS[i].Proc.Kill
//	h.WaitSettled(time.Minute, "m1", "m2", "m3", "m4")
//	h.Verify(Expect{Planned: true, Mark: mark})
//
// OnMoving fires a fault the moment the leader publishes a generation with
// a hand-off in flight (a learner catching up, a revoke pending). Waiting is always on observed
// state — the group's bucket, the workers' event logs, the agents' logs —
// with deadlines, never on time alone.
//
// A Harness owns every process it starts, each in its own process group
// that dies with the test process, and kills them all when its test ends,
// even when it fails; a failed test logs the tails of every log and makes
// the agents and workers still running dump their goroutines into theirs.
//
// A chaos soak draws its faults from a seeded Schedule and injects them
// one after another with Inject, each with its recovery:
//
//	s := NewSchedule(seed, 3, o.SessionTimeout)
//	for time.Since(began) < d { f := s.Next(); h.Inject(f, s.Running()) }
//
// The scenarios are the package's tests; they skip under -short. The
// three-node NATS cluster scenario runs only with HANDOFF_CLUSTER_TESTS=1,
// the chaos soak (TestChaosSoak) only with HANDOFF_SOAK set to its length
// of faults (e.g. 3m); HANDOFF_SOAK_SEED=N replays the schedule of the seed
// a soak printed.
// HANDOFF_SCENARIO_KEEP=1 keeps every scenario's directory (logs, event
// logs, data) and logs where it is.
package scenario

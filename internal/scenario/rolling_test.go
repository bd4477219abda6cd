package scenario

import (
	"sort"
	"testing"
	"time"
)

// TestRollingRestart restarts every member in turn the way an orchestrator
// does: SIGTERM (the agent leaves gracefully, handing its tasks over warm,
// and exits with its worker), then a restart with the same data dir. Every
// move is planned, so no activation replays anything; and the tasks that
// come back to a restarted member find their state there, so its learners
// replay only what was committed while it was away: well below a full
// replay of their changelogs.
func TestRollingRestart(t *testing.T) {
	skipShort(t)
	h := New(t, DefaultOptions())
	ids := []string{"m1", "m2", "m3"}
	h.Start(3)
	// A history to restart against: each restart then misses a little of
	// a long changelog, as in production.
	h.WaitCommitting(60*time.Second, 60)
	mark := h.Mark()

	type comeback struct {
		member   string
		catchUps map[string]CatchUp
		owned    map[string]bool // stateful tasks the member owned when it was stopped
	}
	var comebacks []comeback
	for _, id := range ids {
		m := h.Member(id)
		before, _ := Owned(h.mustGroup(), id)
		owned := map[string]bool{}
		for _, task := range before {
			owned[task] = true
		}
		if err := m.Terminate(); err != nil {
			t.Fatal(err)
		}
		h.Logf("SIGTERM to %s's agent; it owns %v", id, before)
		if err := m.WaitExited(90 * time.Second); err != nil {
			t.Fatalf("%s after SIGTERM: %v", id, err)
		}
		for _, p := range []*Process{m.Agent, m.Worker} {
			if err := p.ExitErr(); err != nil {
				t.Errorf("%s exited with %v after a graceful leave, want status 0", p.Name, err)
			}
		}
		h.WaitSettled(90*time.Second, without(ids, id)...)
		restarted := time.Now()
		h.Restart(m)
		if pos, err := h.Positions(id); err == nil {
			h.Logf("%s rejoined reporting local copies at %v; the owners are at %v", id, pos, h.ownerPositions())
		}
		gv := h.WaitSettled(90*time.Second, ids...)
		h.WaitCommitting(60*time.Second, 20)
		back, _ := Owned(gv, id)
		h.Logf("%s came back with %v", id, back)
		// It gets back as many of the tasks it had when stopped as its
		// share allows: those are where its fresh state is.
		mine := 0
		for _, task := range back {
			if owned[task] {
				mine++
			}
		}
		if want := min(len(back), len(before)); mine < want {
			t.Errorf("%s came back with %v, only %d of the tasks it owned when stopped (%v), want %d: its fresh state went unused", id, back, mine, before, want)
		}
		comebacks = append(comebacks, comeback{member: id, catchUps: h.progress.catchUps(id, restarted), owned: owned})
	}
	rep := h.Verify(Expect{Planned: true, Mark: mark})

	// Replay of the restarted members' learners against a full replay of
	// the same changelogs up to where each caught up.
	var replayed, full uint64
	for _, c := range comebacks {
		tasks := make([]string, 0, len(c.catchUps))
		for task := range c.catchUps {
			tasks = append(tasks, task)
		}
		sort.Strings(tasks)
		for _, task := range tasks {
			cu := c.catchUps[task]
			n := uint64(0)
			for _, r := range rep.Records[task] {
				if r.Seq <= cu.End {
					n++
				}
			}
			replayed += cu.Replayed
			full += n
			h.Logf("%s caught %s up replaying %d of its %d changelog messages (owned it when stopped: %v, caught up: %v)",
				c.member, task, cu.Replayed, n, c.owned[task], cu.CaughtUp)
		}
	}
	if full == 0 {
		t.Fatalf("no learner progress was reported for the restarted members")
	}
	ratio := float64(replayed) / float64(full)
	h.Logf("rolling restart: restarted members replayed %d messages where a full replay is %d: ratio %.3f", replayed, full, ratio)
	if ratio > 1.0/3 {
		t.Errorf("restarted members replayed %.0f%% of their tasks' changelogs, want well below a full replay (at most a third)", 100*ratio)
	}
}

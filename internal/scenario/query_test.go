package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/handoffhq/handoff/changelog"
)

// TestQueriesThroughMoves queries random keys of every stateful task
// through every member, continuously, while the group scales up, a member
// leaves, every member restarts in turn, and a member is killed (-9), with
// a standby of each task. Each answer is checked against the changelog at
// the sequence it reports (and a default-bound answer against the commits
// acknowledged before it was asked). Planned moves: no failed and no wrong
// read. The kill: no wrong read, max_lag reads of the killed member's
// tasks keep being answered by the others, and no read waits longer than
// the failover took.
func TestQueriesThroughMoves(t *testing.T) {
	skipShort(t)
	o := DefaultOptions()
	o.Standbys = 1
	h := New(t, o)
	ids := []string{"m1", "m2", "m3"}
	h.Start(3)
	rd := h.StartReaders(4, 10*time.Millisecond, "steady", ids...)
	stopped := false
	defer func() {
		if !stopped {
			rd.Stop()
		}
	}()
	h.WaitCommitting(60*time.Second, 5)

	rd.Phase("scale-up")
	h.AddMember("m4")
	rd.Add("m4")
	h.WaitSettled(90*time.Second, "m1", "m2", "m3", "m4")
	h.WaitCommitting(60*time.Second, 3)

	rd.Phase("leave")
	leaver := h.Member("m4")
	rd.Drop(leaver.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := leaver.Leave(ctx); err != nil {
		t.Fatalf("POST /leave on m4: %v", err)
	}
	h.WaitSettled(90*time.Second, ids...)
	h.checkLeft(leaver)
	h.WaitCommitting(60*time.Second, 3)

	rd.Phase("rolling restart")
	for _, id := range ids {
		m := h.Member(id)
		rd.Drop(id)
		if err := m.Terminate(); err != nil {
			t.Fatal(err)
		}
		if err := m.WaitExited(90 * time.Second); err != nil {
			t.Fatalf("%s after SIGTERM: %v", id, err)
		}
		h.WaitSettled(90*time.Second, without(ids, id)...)
		h.Restart(m)
		rd.Add(id)
		h.WaitSettled(90*time.Second, ids...)
		h.WaitCommitting(60*time.Second, 3)
	}

	rd.Phase("kill")
	gv := h.mustGroup()
	victim := h.Member(pickNot(gv.Leader, ids...))
	owned, _ := Owned(gv, victim.ID)
	rd.Drop(victim.ID)
	killed := time.Now()
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	h.Logf("killed %s (-9), which owned %v", victim.ID, owned)
	h.WaitSettled(60*time.Second, without(ids, victim.ID)...)
	failover := time.Since(killed)
	h.Logf("the failover took %s (kill to settled)", failover.Round(time.Millisecond))
	h.WaitCommitting(60*time.Second, 3)

	rd.Phase("after the kill")
	h.Restart(victim)
	rd.Add(victim.ID)
	h.WaitSettled(90*time.Second, ids...)
	h.WaitCommitting(60*time.Second, 3)
	rd.Stop()
	stopped = true

	h.checkQueryCLI()
	reads := rd.Reads()
	stats := h.CheckReads(reads)
	h.LogPhases(stats)
	for _, s := range stats {
		if s.Wrong > 0 {
			t.Errorf("%s: %d wrong reads", s.Phase, s.Wrong)
		}
		if s.Failed > 0 && s.Phase != "kill" {
			t.Errorf("%s: %d failed reads (a planned move)", s.Phase, s.Failed)
		}
		if s.Total == 0 {
			t.Errorf("%s: no reads", s.Phase)
		}
	}
	// The kill: max_lag reads of the victim's tasks sent before the group
	// settled were answered by the other members' copies; no read waited
	// longer than the failover.
	lagged := 0
	for _, q := range reads {
		if q.Phase != "kill" || q.Unreachable {
			continue
		}
		if q.Bound == BoundMaxLag && contains(owned, q.Task) && q.Sent.After(killed) && q.Sent.Before(killed.Add(failover)) {
			if q.Status != 200 && q.Status != 404 {
				t.Errorf("max_lag read of %s/%s via %s after the kill: status %d %s", q.Task, q.Key, q.Via, q.Status, q.Err)
			}
			lagged++
		}
		if q.Status != 200 && q.Status != 404 {
			t.Errorf("read of %s/%s via %s (%s) in the kill: status %d %s", q.Task, q.Key, q.Via, q.Bound, q.Status, q.Err)
		} else if d := q.Done.Sub(q.Sent); d > failover {
			t.Errorf("read of %s/%s via %s (%s) in the kill waited %s, longer than the failover (%s)", q.Task, q.Key, q.Via, q.Bound, d, failover)
		}
	}
	h.Logf("kill: %d max_lag reads of %s's tasks between the kill and the settled group, all answered", lagged, victim.ID)
	if lagged == 0 {
		t.Errorf("no max_lag read of the killed member's tasks %v between the kill and the failover: the check saw nothing", owned)
	}
	h.Verify(Expect{Mark: map[string]int{}})
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// checkQueryCLI runs handoff query from outside the group, as an operator
// does, for one key of each stateful task, and checks its answers against
// the changelog at the sequence each reports.
func (h *Harness) checkQueryCLI() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, task := range h.stateful {
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(ctx, h.bins.Handoff, "query", "--nats", h.NATSURL(), "--group", h.opts.Group, "--json", task, "k1")
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			h.t.Errorf("handoff query %s k1: %v: %s", task, err, errOut.String())
			continue
		}
		var res struct {
			Value  []byte `json:"value"`
			Found  bool   `json:"found"`
			Member string `json:"member"`
			Seq    uint64 `json:"seq"`
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			h.t.Errorf("handoff query %s k1 printed %q: %v", task, out.String(), err)
			continue
		}
		recs, err := changelog.ReadTask(ctx, h.js, h.opts.Group, task)
		if err != nil {
			h.t.Fatal(err)
		}
		var upTo []changelog.Record
		for _, r := range recs {
			if r.Seq <= res.Seq {
				upTo = append(upTo, r)
			}
		}
		want, ok := changelog.Replay(upTo).Data["k1"]
		if ok != res.Found || !bytes.Equal(want, res.Value) || len(recs) == 0 || res.Seq > recs[len(recs)-1].Seq || len(upTo) == 0 || upTo[len(upTo)-1].Seq != res.Seq {
			h.t.Errorf("handoff query %s k1 = %q (found %v) from %s at seq %d; the changelog gives %q (found %v) there (a sequence of its own) and ends at %d",
				task, res.Value, res.Found, res.Member, res.Seq, want, ok, recs[len(recs)-1].Seq)
		}
	}
}

package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/internal/poll"
)

// strayAgent prepares an agent process with m's command line, but a data
// dir and log of its own, under name, and the flag values in set (flag →
// value) instead of m's: another agent with m's member ID, or with another
// one. It is killed when the test ends.
func (h *Harness) strayAgent(m *Member, name string, set map[string]string) *Process {
	h.t.Helper()
	dir := filepath.Join(h.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	args := slices.Clone(m.Agent.Args)
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--data-dir" {
			args[i+1] = filepath.Join(dir, "data")
		} else if v, ok := set[args[i]]; ok {
			args[i+1] = v
		}
	}
	p := &Process{Name: name, Path: h.bins.Handoff, Args: args, LogPath: filepath.Join(dir, "agent.log")}
	h.t.Cleanup(func() { _ = p.Kill() })
	return p
}

// memberRecord reads member id's record from the bucket of group g.
func (h *Harness) memberRecord(g, id string) group.MemberRecord {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var r group.MemberRecord
	err := poll.Within(30*time.Second, pollInterval, func() error { // the race's group may be new
		kv, err := h.js.KeyValue(ctx, group.BucketName(g))
		if err != nil {
			return err
		}
		e, err := kv.Get(ctx, group.PrefixMember+id)
		if err != nil {
			return err
		}
		return json.Unmarshal(e.Value(), &r)
	})
	if err != nil {
		h.t.Fatalf("read the record of %s in group %s: %v", id, g, err)
	}
	return r
}

// refused checks that p exited with an error that says member ID id is in
// use and names the holder's incarnation and how to fix it.
func (h *Harness) refused(p *Process, id, incarnation string) {
	h.t.Helper()
	if err := p.Wait(time.Minute); err != nil {
		h.t.Fatalf("%s with the member ID of a live agent: %v, want it to refuse to start", p.Name, err)
	}
	if p.ExitErr() == nil {
		h.t.Errorf("%s exited with status 0, want a failure", p.Name)
	}
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		h.t.Fatal(err)
	}
	log := string(b)
	for _, want := range []string{`member ID "` + id + `" is in use`, "incarnation " + incarnation, "--member-id"} {
		if !strings.Contains(log, want) {
			h.t.Errorf("%s's log lacks %q:\n%s", p.Name, want, tail(p.LogPath, 5))
		}
	}
	h.Logf("%s refused: %s", p.Name, strings.TrimSpace(tail(p.LogPath, 1)))
}

// TestDuplicateMemberID starts agents that claim member IDs already in
// use, as an operator who copies a config does:
//
//   - a second agent with m1's member ID and another data dir refuses to
//     start, naming m1's incarnation, and the group does not notice it:
//     no new generation, m1 keeps its tasks;
//   - two new agents with one new ID started at once: one joins, the
//     other refuses;
//   - m1 killed (-9) and restarted at once on its own data dir, while its
//     old record is still alive, is the same member: it takes its record
//     over without waiting for it to expire, and the group settles
//     without churn and loses nothing.
func TestDuplicateMemberID(t *testing.T) {
	skipShort(t)
	o := DefaultOptions()
	// Long enough that m1's record outlives its kill and restart below
	// even on a loaded machine: the restart must take it over, not find
	// it expired.
	o.SessionTimeout = 10 * time.Second
	h := New(t, o)
	h.Start(2)
	mark := h.Mark()
	m1 := h.Member("m1")
	before := h.mustGroup()
	holder := h.memberRecord(h.opts.Group, "m1")

	dup := h.strayAgent(m1, "m1-duplicate", nil)
	if err := dup.Start(); err != nil {
		t.Fatal(err)
	}
	h.refused(dup, "m1", holder.Incarnation)
	after := h.mustGroup()
	if after.Generation != before.Generation {
		t.Errorf("the refused duplicate moved the group from generation %d to %d", before.Generation, after.Generation)
	}
	ownedBefore, _ := Owned(before, "m1")
	ownedAfter, _ := Owned(after, "m1")
	if !slices.Equal(ownedBefore, ownedAfter) {
		t.Errorf("m1 owned %v before the duplicate, %v after", ownedBefore, ownedAfter)
	}

	// Two agents with one new ID, at once, in a group of their own (the
	// winner has no worker: it must not take m1's and m2's tasks).
	race := map[string]string{"--member-id": "r1", "--group": "race"}
	a, b := h.strayAgent(m1, "r1-a", race), h.strayAgent(m1, "r1-b", race)
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	var loser, winner *Process
	h.Eventually("one of two agents with one new ID refused", time.Minute, func() error {
		switch {
		case !a.Running() && !b.Running():
			return poll.Permanent(errors.New("both exited"))
		case !a.Running():
			loser, winner = a, b
		case !b.Running():
			loser, winner = b, a
		default:
			return errors.New("both run")
		}
		return nil
	})
	h.refused(loser, "r1", h.memberRecord("race", "r1").Incarnation)
	h.must(winner.Kill())

	// m1 crashes and comes back at once on its own data dir.
	if err := m1.Kill(); err != nil {
		t.Fatal(err)
	}
	h.Restart(m1)
	if n := m1.Log.Count("took over the member record of this data dir's previous run"); n != 1 {
		t.Errorf("m1 restarted on its data dir logged %d take-overs of its record, want 1", n)
	}
	settled := h.WaitSettled(90*time.Second, "m1", "m2")
	h.WaitCommitting(60*time.Second, 10)
	if gv := h.mustGroup(); gv.Generation != settled.Generation {
		t.Errorf("generation moved from %d to %d after the group settled: churn", settled.Generation, gv.Generation)
	}
	h.Verify(Expect{Mark: mark})
}

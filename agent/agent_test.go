package agent_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/poll"
)

func TestConvergeJoinLeave(t *testing.T) {
	c := newCluster(t, testConfig("orders-0..11", "enrich-0..3"))
	c.start("m1")
	c.start("m2")
	poll.Eventually(t, 20*time.Second, "two members balanced", func() error {
		gv := c.view()
		if err := balanced(gv, "m1", "m2"); err != nil {
			return err
		}
		return c.activeEverywhere(gv)
	})
	gen := c.view().Generation

	c.start("m3")
	poll.Eventually(t, 20*time.Second, "three members balanced", func() error {
		gv := c.view()
		if err := balanced(gv, "m1", "m2", "m3"); err != nil {
			return err
		}
		return c.activeEverywhere(gv)
	})
	if g := c.view().Generation; g <= gen {
		t.Fatalf("generation after join = %d, want > %d", g, gen)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.members["m3"].a.Leave(ctx); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := c.members["m3"].a.WaitDone(ctx); err != nil {
		t.Fatalf("m3 was not told to shut down: %v", err)
	}
	gv := c.view()
	for _, tk := range gv.Tasks {
		if tk.Active == "m3" {
			t.Errorf("task %s still on m3 after its leave ended", tk.ID)
		}
	}
	if v := c.members["m3"].a.Assignment(); v.State != api.StateDone || !v.Shutdown {
		t.Errorf("m3 view after leave: state %q shutdown %v, want done/true", v.State, v.Shutdown)
	}
	c.stop("m3")
	poll.Eventually(t, 20*time.Second, "two members balanced after leave", func() error {
		gv := c.view()
		if err := balanced(gv, "m1", "m2"); err != nil {
			return err
		}
		return c.activeEverywhere(gv)
	})
}

func TestLeaderFailoverContinuesGenerations(t *testing.T) {
	c := newCluster(t, testConfig("orders-0..5", ""))
	for _, id := range []string{"m1", "m2", "m3"} {
		c.start(id)
	}
	poll.Eventually(t, 20*time.Second, "balanced", func() error { return balanced(c.view(), "m1", "m2", "m3") })
	old, err := c.leader()
	if err != nil {
		t.Fatal(err)
	}
	gen := c.view().Generation
	c.crash(old)
	var rest []string
	for _, id := range []string{"m1", "m2", "m3"} {
		if id != old {
			rest = append(rest, id)
		}
	}
	poll.Eventually(t, 20*time.Second, "a new leader rebalancing the crashed leader's tasks", func() error {
		l, err := c.leader()
		if err != nil {
			return err
		}
		if l == old {
			return fmt.Errorf("leader is still %s", old)
		}
		gv := c.view()
		if gv.Generation <= gen {
			return fmt.Errorf("generation %d, want > %d", gv.Generation, gen)
		}
		if err := balanced(gv, rest...); err != nil {
			return err
		}
		return c.activeEverywhere(gv)
	})
	// The old leader comes back with its data: it rejoins as a member.
	c.start(old)
	poll.Eventually(t, 20*time.Second, "balanced with the old leader back", func() error {
		gv := c.view()
		if err := balanced(gv, "m1", "m2", "m3"); err != nil {
			return err
		}
		return c.activeEverywhere(gv)
	})
}

func TestSingleLeader(t *testing.T) {
	c := newCluster(t, testConfig("orders-0..3", ""))
	for _, id := range []string{"m1", "m2", "m3", "m4"} {
		c.start(id)
	}
	poll.Eventually(t, 20*time.Second, "balanced", func() error { return balanced(c.view(), "m1", "m2", "m3", "m4") })
	leaders := 0
	for _, m := range c.members {
		if m.a.Leading() {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d members lead, want 1", leaders)
	}
}

// TestMemberWithoutTasksJoins checks that a member that gets no task (the
// group is balanced without it) still becomes a member and ready.
func TestMemberWithoutTasksJoins(t *testing.T) {
	c := newCluster(t, testConfig("orders-0..1", ""))
	c.start("m1")
	c.start("m2")
	poll.Eventually(t, 20*time.Second, "balanced", func() error { return balanced(c.view(), "m1", "m2") })
	m3 := c.start("m3")
	poll.Eventually(t, 20*time.Second, "m3 a member with nothing to do", func() error {
		if err := m3.a.Ready(); err != nil {
			return err
		}
		if v := m3.a.Assignment(); v.State != api.StateMember {
			return fmt.Errorf("m3 state %q", v.State)
		}
		return nil
	})
}

// TestFencedCommitReportsTakeover appends another owner's epoch marker
// behind the active member's back: its next commit must be refused with
// not_owner (the fence), nothing of it applied, and the task must leave
// the worker's view.
func TestFencedCommitReportsTakeover(t *testing.T) {
	c := newCluster(t, testConfig("orders-0", ""))
	m1 := c.start("m1")
	poll.Eventually(t, 20*time.Second, "orders-0 active", func() error { return c.activeEverywhere(c.view()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := m1.a.Commit(ctx, "orders-0", api.CommitRequest{Puts: []api.KV{{Key: []byte("k"), Value: []byte("1")}}}); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	c.appendForeignMarker(ctx, "orders-0", 99)
	_, err := m1.a.Commit(ctx, "orders-0", api.CommitRequest{Puts: []api.KV{{Key: []byte("k"), Value: []byte("2")}}})
	if !errors.Is(err, api.ErrNotOwner) {
		t.Fatalf("commit after a takeover: %v, want ErrNotOwner", err)
	}
	if v, err := m1.store.Get("orders-0", []byte("k")); err != nil || string(v) != "1" {
		t.Errorf("local k = %q, %v; want the first commit's 1", v, err)
	}
	for _, tv := range m1.a.Assignment().Tasks {
		if tv.ID == "orders-0" && tv.Role == api.RoleActive {
			t.Errorf("orders-0 still active in the view after the takeover")
		}
	}
}

// appendForeignMarker appends an epoch marker of another owner at epoch
// to task's changelog, behind its owner's back.
func (c *cluster) appendForeignMarker(ctx context.Context, task string, epoch uint64) {
	c.t.Helper()
	log, err := changelog.Open(ctx, c.js, changelog.Options{Group: c.group})
	if err != nil {
		c.t.Fatal(err)
	}
	last, err := log.Last(ctx, task)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := log.Append(ctx, task, last, changelog.Entry{Kind: changelog.KindEpoch, Epoch: epoch}); err != nil {
		c.t.Fatal(err)
	}
}

// TestRestartAfterLeaveIsNotShutDown: the last member of a group leaves,
// so that the generation telling it to shut down stays the latest until a
// leader plans again, and is started again under its ID: it is a member
// again, and never tells its new worker to shut down.
func TestRestartAfterLeaveIsNotShutDown(t *testing.T) {
	c := newCluster(t, testConfig("orders-0..3", ""))
	c.start("m1")
	poll.Eventually(t, 20*time.Second, "m1 owns every task", func() error { return balanced(c.view(), "m1") })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.members["m1"].a.Leave(ctx); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := c.members["m1"].a.WaitDone(ctx); err != nil {
		t.Fatalf("m1 was not told to shut down: %v", err)
	}
	c.stop("m1")
	a := c.start("m1").a
	var after uint64
	for ctx.Err() == nil {
		v := a.WaitAssignment(ctx, after)
		if v.Shutdown || v.State == api.StateDone {
			t.Fatalf("m1, started again after its leave, was told to shut down: %+v", v)
		}
		if v.State == api.StateMember && len(v.Tasks) > 0 {
			return
		}
		after = v.Version
	}
	t.Fatalf("m1 did not become a member with tasks again: %+v", a.Assignment())
}

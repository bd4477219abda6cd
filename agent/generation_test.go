package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/internal/poll"
)

// TestCompactGenerationLeaderStops stops the leader in the middle of a
// compact generation's publication, after it wrote a member's assignment
// (before the full record) or the full record (before the generation
// record), killed there or paused there until another member leads, with
// the assignments written one by one or in an atomic batch. The member
// whose assignment was written for a generation that never came must not
// act on it: every member's own view ends up agreeing with the group's,
// balanced, under a new leader whose generations continue; a paused leader
// that resumes is fenced off; and the old leader rejoins.
func TestCompactGenerationLeaderStops(t *testing.T) {
	for _, writes := range []string{"one-by-one", "batched"} {
		for _, step := range []string{group.PrefixAssignment, group.KeyIndex} {
			for _, how := range []string{"killed", "paused"} {
				t.Run(writes+"/"+strings.TrimSuffix(step, ".")+"/"+how, func(t *testing.T) {
					compactLeaderStops(t, writes == "batched", step, how)
				})
			}
		}
	}
}

// compactLeaderStops is one case of TestCompactGenerationLeaderStops.
func compactLeaderStops(t *testing.T, batched bool, step, how string) {
	if batched {
		undo := agent.SetPublishBatchFrom(1)
		t.Cleanup(undo)
	}
	c := newCluster(t, testConfig("orders-0..8", ""))
	ids := []string{"m1", "m2", "m3"}
	for _, id := range ids {
		c.start(id)
	}
	poll.Eventually(t, 20*time.Second, "balanced", func() error { return balanced(c.view(), ids...) })
	old, err := c.leader()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g, _, err := group.ReadGeneration(ctx, c.kv)
	if err != nil || !g.Compact {
		t.Fatalf("generation %d compact %v, %v: want a compact one", g.Generation, g.Compact, err)
	}
	reached, resume := make(chan string, 1), make(chan struct{})
	var once sync.Once
	agent.SetAfterPublishWrite(c.members[old].a, func(key string) {
		if strings.HasPrefix(key, step) {
			once.Do(func() {
				reached <- key
				<-resume
			})
		}
	})
	c.start("m4") // a generation that writes assignments
	written := <-reached
	t.Logf("leader %s stopped after writing %s (batched %v)", old, written, batched)
	switch how {
	case "killed":
		c.members[old].local.NC.Close() // nothing more is heard from it
		close(resume)
		c.crash(old)
	case "paused":
		// Its lease ends while it is stopped (its session would):
		// another member leads, then it goes on, fenced.
		if err := c.kv.Delete(ctx, group.KeyLease); err != nil {
			t.Fatal(err)
		}
		poll.Eventually(t, 20*time.Second, "another leader publishing", func() error {
			ng, _, err := group.ReadGeneration(ctx, c.kv)
			if err != nil {
				return err
			}
			if ng.Leader == old || ng.Generation <= g.Generation {
				return fmt.Errorf("generation %d by %s", ng.Generation, ng.Leader)
			}
			return nil
		})
		close(resume)
	}
	all := []string{"m1", "m2", "m3", "m4"}
	var live []string
	for _, id := range all {
		if how == "paused" || id != old {
			live = append(live, id)
		}
	}
	poll.Eventually(t, 30*time.Second, "balanced under a new leader, every member's view agreeing", func() error {
		l, err := c.leader()
		if err != nil {
			return err
		}
		if l == old {
			return fmt.Errorf("%s still leads", old)
		}
		gv := c.view()
		if err := balanced(gv, live...); err != nil {
			return err
		}
		return c.activeEverywhere(gv)
	})
	if how == "killed" {
		c.start(old)
		poll.Eventually(t, 30*time.Second, "balanced with the old leader back", func() error {
			gv := c.view()
			if err := balanced(gv, all...); err != nil {
				return err
			}
			return c.activeEverywhere(gv)
		})
	}
}

// TestOrphanAssignmentIgnored: an assignment written for a generation that
// was never published (its leader died between the two writes) reaches
// its member's watch; the member keeps its part of the generation in force
// until one that names its leadership's term and number comes, even when
// the next generation leaves its part as it was.
func TestOrphanAssignmentIgnored(t *testing.T) {
	// One task each: the generation that adds m4 moves none (a task
	// moves for balance only when that narrows the spread), and leaves
	// m2's assignment as it was.
	c := newCluster(t, testConfig("orders-0..2", ""))
	ids := []string{"m1", "m2", "m3"}
	for _, id := range ids {
		c.start(id)
	}
	poll.Eventually(t, 20*time.Second, "balanced", func() error { return balanced(c.view(), ids...) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, _, err := group.ReadGeneration(ctx, c.kv)
	if err != nil || !g.Compact {
		t.Fatalf("generation %d compact %v, %v: want a compact one", g.Generation, g.Compact, err)
	}
	orphan, err := json.Marshal(group.MemberAssignment{Member: "m2", Generation: g.Generation + 1, Term: g.Term + 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.kv.Put(ctx, group.PrefixAssignment+"m2", orphan); err != nil {
		t.Fatal(err)
	}
	c.start("m4")
	poll.Eventually(t, 20*time.Second, "a generation with m4, m2 still serving its tasks", func() error {
		gv := c.view()
		if gv.Generation <= g.Generation {
			return fmt.Errorf("generation %d", gv.Generation)
		}
		found := false
		for _, m := range gv.Members {
			found = found || m.ID == "m4"
		}
		if !found {
			return errors.New("m4 not in the generation")
		}
		if err := balanced(gv, ids...); err != nil {
			return err
		}
		return c.activeEverywhere(gv)
	})
}

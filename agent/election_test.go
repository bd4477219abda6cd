package agent_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/internal/poll"
)

// TestLeaderAndItsCandidatesDie: the generation names the members besides
// the leader that watch the lease; when the leader and every one of them
// die at once, a member that only looks at the lease now and then finds it
// gone and leads, and the group is balanced again on the survivors.
func TestLeaderAndItsCandidatesDie(t *testing.T) {
	ids := []string{"m1", "m2", "m3", "m4", "m5", "m6"}
	c := newCluster(t, testConfig("orders-0..11", ""))
	for _, id := range ids {
		c.start(id)
	}
	poll.Eventually(t, 30*time.Second, "balanced", func() error { return balanced(c.view(), ids...) })
	var g group.GenerationRecord
	poll.Eventually(t, 10*time.Second, "a generation naming candidates", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if g, _, err = group.ReadGeneration(ctx, c.kv); err != nil {
			return err
		}
		if len(g.Candidates) != group.Candidates || slices.Contains(g.Candidates, g.Leader) {
			return fmt.Errorf("generation %d led by %s names candidates %v", g.Generation, g.Leader, g.Candidates)
		}
		return nil
	})
	dead := append([]string{g.Leader}, g.Candidates...)
	var rest []string
	for _, id := range ids {
		if !slices.Contains(dead, id) {
			rest = append(rest, id)
		}
	}
	for _, id := range dead {
		c.crash(id)
	}
	// A non-candidate looks at the lease every 5 to 10 session timeouts
	// (2 s here), and the lease lives a session timeout.
	poll.Eventually(t, 60*time.Second, "a non-candidate leading, balanced on the survivors", func() error {
		l, err := c.leader()
		if err != nil {
			return err
		}
		if !slices.Contains(rest, l) {
			return fmt.Errorf("leader %s", l)
		}
		gv := c.view()
		if err := balanced(gv, rest...); err != nil {
			return err
		}
		return c.activeEverywhere(gv)
	})
}

package agent_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/internal/poll"
)

// TestStandbyTailsAcrossNATSRestarts: a standby's tailing restore starts
// afresh each time the replay connection comes back after the server
// restarts, from what its store has applied, and its copy keeps up with
// the owner's commits with nothing missed: every key the owner committed
// is in the standby's store at the owner's last sequence.
func TestStandbyTailsAcrossNATSRestarts(t *testing.T) {
	cfg := testConfig("s0", "")
	cfg.Standbys = 1
	c := newCluster(t, cfg)
	m1 := c.start("m1")
	poll.Eventually(t, 20*time.Second, "s0 active on m1", func() error { return c.activeEverywhere(c.view()) })
	m2 := c.start("m2")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	committed := 0
	var last uint64
	commit := func() {
		t.Helper()
		key := fmt.Sprintf("k%d", committed)
		poll.Eventually(t, 30*time.Second, "a commit of "+key, func() error {
			// Each try is bounded, as a worker's call is by its client's
			// timeout: a publish sent while the connection was down whose
			// acknowledgement the restart lost is never answered.
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			res, err := m1.a.Commit(actx, "s0", api.CommitRequest{
				Puts: []api.KV{{Key: []byte(key), Value: []byte("v")}}, Checkpoint: []byte(key)})
			if errors.Is(err, api.ErrResume) {
				// The acknowledgement of an earlier try was lost in the
				// restart: that try landed.
				meta, _, merr := m1.store.Meta("s0")
				if merr != nil {
					return merr
				}
				last = meta.Applied
				return nil
			}
			if err != nil {
				return err
			}
			last = res.Seq
			return nil
		})
		committed++
	}
	caughtUp := func(what string) {
		t.Helper()
		poll.Eventually(t, 30*time.Second, what, func() error {
			meta, ok, err := m2.store.Meta("s0")
			if err != nil || !ok || meta.Applied < last {
				return fmt.Errorf("m2's copy of s0 at %d (%v, %v), the owner at %d", meta.Applied, ok, err, last)
			}
			return nil
		})
	}
	for range 5 {
		commit()
	}
	caughtUp("a current standby on m2")
	for round := range 3 {
		c.srv.Restart(t)
		for range 5 {
			commit()
		}
		caughtUp(fmt.Sprintf("m2's copy current after restart %d", round+1))
	}
	for i := range committed {
		key := fmt.Sprintf("k%d", i)
		if v, err := m2.store.Get("s0", []byte(key)); err != nil || string(v) != "v" {
			t.Errorf("m2's copy of s0 lacks %s: %q, %v", key, v, err)
		}
	}
}

package agent_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/sidecar"
)

// poller is a worker that only long-polls its agent's GET /assignment, as
// a worker's loop does, until stopped.
type poller struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func startPoller(c *client.Client) *poller {
	ctx, cancel := context.WithCancel(context.Background())
	p := &poller{cancel: cancel}
	p.done.Go(func() {
		var after uint64
		for ctx.Err() == nil {
			if v, err := c.Assignment(ctx, after, 30*time.Second); err == nil {
				after = v.Version
			}
		}
	})
	return p
}

// stop ends the poll in flight (its connection closes, as when the worker
// dies) and waits for the poller to return.
func (p *poller) stop() {
	p.cancel()
	p.done.Wait()
}

// memberWorker returns member's worker state in the group's view.
func memberWorker(c *cluster, member string) (string, *time.Time) {
	for _, mv := range c.view().Members {
		if mv.ID == member {
			return mv.Worker, mv.WorkerSince
		}
	}
	return "", nil
}

// TestWorkerWatch runs one member that requires its worker, with its API:
// its record says detached until a worker polls, attached while it does,
// detached once it stops (since the end of its last poll), and lost after
// the worker timeout, when the agent refuses the worker's commits. A
// worker that polls again is attached again and can commit again.
func TestWorkerWatch(t *testing.T) {
	c := newCluster(t, testConfig("w-0..1", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, stop := c.startM1(ctx, sidecar.Options{
		DataDir: filepath.Join(t.TempDir(), "m1"),
		Agent: agent.Options{Group: c.group, MemberID: "m1", Config: c.cfg, Logger: c.logger("m1"),
			RequireWorker: true, WorkerTimeout: 1500 * time.Millisecond},
		Listen: "127.0.0.1:0",
		Logger: c.logger("m1"),
	})
	defer stop()
	cl := m.Client()

	poll.Eventually(t, 10*time.Second, "m1's worker detached before any poll", func() error {
		if w, _ := memberWorker(c, "m1"); w != api.WorkerDetached {
			return fmt.Errorf("worker %q", w)
		}
		return nil
	})
	w := startPoller(cl)
	active := func() error {
		v, err := cl.Assignment(ctx, 0, 0)
		if err != nil {
			return err
		}
		n := 0
		for _, tv := range v.Tasks {
			if tv.Role == api.RoleActive {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("%d of 2 tasks active: %+v", n, v.Tasks)
		}
		return nil
	}
	poll.Eventually(t, 10*time.Second, "m1's worker attached and both tasks active", func() error {
		if w, _ := memberWorker(c, "m1"); w != api.WorkerAttached {
			return fmt.Errorf("worker %q", w)
		}
		return active()
	})
	commit := func() error {
		_, err := cl.Commit(ctx, "w-0", api.CommitRequest{Puts: []api.KV{{Key: []byte("k"), Value: []byte("v")}}})
		return err
	}
	// The commit changes the view, which may end the poller's open poll
	// just before it stops: its last poll ends after this.
	stopping := time.Now()
	if err := commit(); err != nil {
		t.Fatalf("commit with the worker attached: %v", err)
	}
	w.stop()
	poll.Eventually(t, 10*time.Second, "m1's worker lost", func() error {
		if w, since := memberWorker(c, "m1"); w != api.WorkerLost || since == nil {
			return fmt.Errorf("worker %q since %v", w, since)
		}
		return nil
	})
	lost := time.Now()
	if _, since := memberWorker(c, "m1"); since.Before(stopping) || lost.Sub(*since) < 1500*time.Millisecond {
		t.Errorf("lost worker detached since %v: want the end of its last poll, after %v and at least the worker timeout before %v",
			since, stopping, lost)
	}
	if err := commit(); !errors.Is(err, api.ErrNotOwner) {
		t.Errorf("commit of the lost worker = %v, want it refused as not_owner", err)
	}

	w = startPoller(cl)
	defer w.stop()
	poll.Eventually(t, 10*time.Second, "m1's worker attached again with both tasks active", func() error {
		if w, _ := memberWorker(c, "m1"); w != api.WorkerAttached {
			return fmt.Errorf("worker %q", w)
		}
		return active()
	})
	if err := commit(); err != nil {
		t.Errorf("commit once the worker is back: %v", err)
	}
}

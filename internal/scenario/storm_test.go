package scenario

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
)

// TestCommitStormRSS drives one agent process as hard as its API allows —
// one committer per task, each committing batches of 100 puts of 100
// bytes over a fixed key space of 1,000 keys per task, back to back — for
// HANDOFF_STORM (e.g. 2m), and logs the agent's RSS every 10 seconds: it
// tells a leak (RSS rising with the commits) from caches and memtables
// filling up to their bounds (RSS flattening while the commits go on); a
// storm of 2 minutes or more fails if the RSS rose by more than a quarter
// in its second half. Set GODEBUG=gctrace=1 (and HANDOFF_SCENARIO_KEEP=1)
// as well to get the agent's Go heap in its log. Skipped unless
// HANDOFF_STORM is set.
func TestCommitStormRSS(t *testing.T) {
	v := os.Getenv("HANDOFF_STORM")
	if v == "" {
		t.Skip("commit storm: set HANDOFF_STORM=2m to run it")
	}
	skipShort(t)
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("HANDOFF_STORM=%q: use a positive duration such as 2m", v)
	}
	o := DefaultOptions()
	o.Stateful, o.Stateless = "t-0..3", ""
	h := New(t, o)
	m := h.AddAgent("m1")
	cl := m.Client()
	var view api.View
	h.Eventually("m1 active on every task", time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if view, err = cl.Assignment(ctx, 0, 0); err != nil {
			return err
		}
		if len(view.Tasks) != len(h.Stateful()) {
			return fmt.Errorf("%d of %d tasks assigned", len(view.Tasks), len(h.Stateful()))
		}
		for _, tv := range view.Tasks {
			if tv.Role != api.RoleActive {
				return fmt.Errorf("%s is %s", tv.ID, tv.Role)
			}
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var commits atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(view.Tasks))
	for i, tv := range view.Tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			puts := make([]api.KV, 100)
			for n := 0; ctx.Err() == nil; n++ {
				for j := range puts {
					puts[j] = api.KV{Key: fmt.Appendf(nil, "key-%04d", (n*100+j)%1000), Value: make([]byte, 100)}
					puts[j].Value[0] = byte(n + i)
				}
				req := api.CommitRequest{Puts: puts, Checkpoint: fmt.Appendf(nil, "%d", n), Epoch: tv.Epoch}
				if _, err := cl.Commit(ctx, tv.ID, req); err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("commit %d to %s: %w", n, tv.ID, err)
					}
					return
				}
				commits.Add(1)
			}
		}()
	}

	start := time.Now()
	var series []string
	var atHalf, lateMax int64 // RSS at half time, and the most after it
	sample := func() {
		rss, err := RSS(m.Agent.Pid())
		if err != nil {
			t.Error(err)
			return
		}
		if time.Since(start) >= d/2 {
			if atHalf == 0 {
				atHalf = rss
			}
			lateMax = max(lateMax, rss)
		}
		s := fmt.Sprintf("%4.0fs %s (%d commits)", time.Since(start).Seconds(), mb(rss), commits.Load())
		series = append(series, s)
		h.Logf("storm: agent RSS at %s", s)
	}
	sample()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case err := <-errs:
			t.Fatal(err)
		case <-tick.C:
			sample()
		}
	}
	wg.Wait()
	sample()
	h.Logf("commit storm of %s: %d commits of 100 puts (%.0f/s); agent RSS:\n  %s", d, commits.Load(),
		float64(commits.Load())/time.Since(start).Seconds(), strings.Join(series, "\n  "))
	// The memtables reach their largest size within the first minute of
	// a storm; from then on a growing RSS is a leak.
	if d >= 2*time.Minute && atHalf > 0 && float64(lateMax) > 1.25*float64(atHalf) {
		t.Errorf("agent RSS kept rising through the second half of the storm: %s at half time, up to %s after: a leak?", mb(atHalf), mb(lateMax))
	}
}

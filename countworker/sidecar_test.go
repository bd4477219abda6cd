package countworker

import (
	"strconv"
	"testing"
	"time"

	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

// The counter's tests run it against an in-memory agent
// (httpapitest.Backend) served by the real API.

// waitFor waits until cond holds, checking it at each change of b: a
// commit, a release, a new view.
func waitFor(t *testing.T, b *httpapitest.Backend, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		changed := b.Progress()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// checkpointOf is the input sequence task id's last checkpoint on b reached.
func checkpointOf(b *httpapitest.Backend, id string) uint64 {
	seq, _ := DecodeCheckpoint(b.Checkpoint(id))
	return seq
}

// checkCounts checks the counts task id's state on b holds.
func checkCounts(t *testing.T, b *httpapitest.Backend, id string, want map[string]uint64) {
	t.Helper()
	for k, n := range want {
		if v, _ := b.Value(id, k); v != strconv.FormatUint(n, 10) {
			t.Errorf("count of %s = %q; want %d", k, v, n)
		}
	}
}

package scenario

import (
	"time"

	"github.com/handoffhq/handoff/internal/poll"
)

// pollInterval paces condition polls.
const pollInterval = 50 * time.Millisecond

// Eventually waits until cond holds (returns nil), failing the test with
// what and cond's last error after timeout, or at once if a member process
// the scenario did not stop has exited.
func (h *Harness) Eventually(what string, timeout time.Duration, cond func() error) {
	h.t.Helper()
	start := time.Now()
	err := poll.Within(timeout, pollInterval, func() error {
		if err := h.exited(); err != nil {
			return poll.Permanent(err)
		}
		return cond()
	})
	if err != nil {
		h.t.Fatalf("timed out waiting for %s: %v", what, err)
	}
	h.Logf("%s: after %s", what, time.Since(start).Round(time.Millisecond))
}

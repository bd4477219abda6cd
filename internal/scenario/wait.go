package scenario

import (
	"errors"
	"fmt"
	"time"
)

// pollInterval paces condition polls.
const pollInterval = 50 * time.Millisecond

// permanentError is a condition's error that no further waiting can cure
// (a process exited): poll returns it at once.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// permanent marks err as one that ends a poll at once.
func permanent(err error) error { return permanentError{err} }

// poll checks cond every pollInterval until it returns nil, or until
// timeout passes or cond returns a permanent error; then it returns cond's
// last error. It never waits on time alone: the deadline only bounds how
// long a condition may take.
func poll(timeout time.Duration, cond func() error) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		var perm permanentError
		if errors.As(err, &perm) {
			return perm.err
		}
		select {
		case <-deadline.C:
			return fmt.Errorf("after %s: %w", timeout, err)
		case <-tick.C:
		}
	}
}

// Eventually waits until cond holds (returns nil), failing the test with
// what and cond's last error after timeout, or at once if a member process
// the scenario did not stop has exited.
func (h *Harness) Eventually(what string, timeout time.Duration, cond func() error) {
	h.t.Helper()
	start := time.Now()
	err := poll(timeout, func() error {
		if err := h.exited(); err != nil {
			return permanent(err)
		}
		return cond()
	})
	if err != nil {
		h.t.Fatalf("timed out waiting for %s: %v", what, err)
	}
	h.Logf("%s: after %s", what, time.Since(start).Round(time.Millisecond))
}

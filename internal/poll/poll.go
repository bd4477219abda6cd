// Package poll waits for a condition that no event announces: it checks
// the condition at a steady pace until it holds, and a deadline bounds how
// long that may take, so that a wait never rests on time alone. Where an
// event does announce the change (a channel, a long-poll), wait on that
// instead. The tests use Eventually; the harnesses (internal/cluster, the
// scenarios, the conformance run) use Until and Within.
//
// It imports nothing of the testing package, so that the tools built on
// the harnesses (the lab behind handoff-lab bench and demo) link none of it.
package poll

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Interval is the pace of Eventually.
const Interval = 20 * time.Millisecond

// permanentError is a condition's error that no further waiting can cure.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that no further waiting can cure (a process
// the condition waits on has exited): a poll that gets it from its
// condition returns it at once, unwrapped.
func Permanent(err error) error { return permanentError{err} }

// Until checks cond every interval, the first time at once, until it
// returns nil. It returns nil then; cond's error at once if it is
// Permanent; or, once ctx ends, ctx's error with cond's last error.
func Until(ctx context.Context, interval time.Duration, cond func() error) error {
	tick := time.NewTicker(interval)
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
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		case <-tick.C:
		}
	}
}

// Within is Until with a deadline timeout from now instead of a context;
// when it passes, its error reads "after <timeout>: <cond's last error>".
func Within(timeout, interval time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), timeout, fmt.Errorf("after %s", timeout))
	defer cancel()
	return Until(ctx, interval, cond)
}

// TB is the part of testing.TB that Eventually uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Eventually checks cond every Interval until it returns nil, and fails t
// with what and cond's last error if it has not within timeout (or at
// once, if that error is Permanent).
func Eventually(t TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Within(timeout, Interval, cond); err != nil {
		t.Fatalf("timed out waiting for %s: %v", what, err)
	}
}

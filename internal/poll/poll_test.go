package poll

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestWithinReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	err := Within(time.Minute, time.Millisecond, func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Within = %v after %d calls, want nil after 3", err, calls)
	}
}

func TestWithinEndsAtOnceOnAPermanentError(t *testing.T) {
	gone := errors.New("the process exited")
	calls := 0
	err := Within(time.Minute, time.Millisecond, func() error {
		calls++
		return Permanent(gone)
	})
	if err != gone || calls != 1 {
		t.Fatalf("Within = %v after %d calls, want %v after 1", err, calls, gone)
	}
}

func TestWithinSaysWhatHeldItUp(t *testing.T) {
	last := errors.New("3 of 4 tasks")
	err := Within(30*time.Millisecond, time.Millisecond, func() error { return last })
	if !errors.Is(err, last) || !strings.HasPrefix(err.Error(), "after 30ms: ") {
		t.Fatalf("Within = %v, want after 30ms: wrapping %v", err, last)
	}
}

func TestUntilEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Until(ctx, time.Millisecond, func() error {
		calls++
		if calls == 2 {
			cancel()
		}
		return errors.New("not yet")
	})
	if !errors.Is(err, context.Canceled) || calls != 2 {
		t.Fatalf("Until = %v after %d calls, want context.Canceled after 2", err, calls)
	}
}

// fatalTB records Eventually's failure.
type fatalTB struct{ failed string }

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestEventually(t *testing.T) {
	var ok fatalTB
	n := 0
	Eventually(&ok, time.Minute, "n to reach 2", func() error {
		if n++; n < 2 {
			return fmt.Errorf("n = %d", n)
		}
		return nil
	})
	if ok.failed != "" {
		t.Fatalf("Eventually failed: %s", ok.failed)
	}
	var late fatalTB
	Eventually(&late, 10*time.Millisecond, "something that never happens", func() error { return errors.New("never") })
	if want := "timed out waiting for something that never happens: after 10ms: never"; late.failed != want {
		t.Fatalf("Eventually failed with %q, want %q", late.failed, want)
	}
}

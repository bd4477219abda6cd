package sidecar

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/handoffhq/handoff/statestore"
)

// The agent's exit message names the store's failure and what the next
// start does about it: a failure for want of space is no corruption.
func TestStoreFailedNamesTheFailure(t *testing.T) {
	corrupt := fmt.Errorf("%w: on-disk corruption: 000006.sst", statestore.ErrCorrupt)
	failed := fmt.Errorf("%w: pebble panicked in commit: write: no space left on device", statestore.ErrFailed)
	for _, c := range []struct {
		name      string
		err       error
		policy    statestore.CorruptPolicy
		want, not []string
	}{
		{"corrupt", corrupt, statestore.Rebuild, []string{"is corrupt", "moves the store aside", "000006.sst"}, []string{"free space"}},
		{"corrupt, fail policy", corrupt, statestore.Fail, []string{"is corrupt", "refuses it", "move its directory aside"}, []string{"free space"}},
		{"failed", failed, statestore.Rebuild, []string{"failed", "free space", "no space left"}, []string{"corrupt", "aside"}},
	} {
		err := storeFailed(c.err, c.policy)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: storeFailed(%v) does not wrap it", c.name, c.err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: storeFailed = %q, want it to say %q", c.name, err, w)
			}
		}
		for _, n := range c.not {
			if strings.Contains(err.Error(), n) {
				t.Errorf("%s: storeFailed = %q, want no %q", c.name, err, n)
			}
		}
	}
}

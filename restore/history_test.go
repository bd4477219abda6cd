package restore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/snapshot"
)

// commitFive commits five entries to task "t" and returns their writer
// and the last one's sequence.
func commitFive(t *testing.T, e *env) (*writer, uint64) {
	w := &writer{log: e.log, store: memStore(t), task: "t"}
	var last uint64
	for i := 1; i <= 5; i++ {
		last = w.commit(t, entry(i))
	}
	return w, last
}

// A task whose changelog was purged whole is refused, not restored empty,
// when the group's records show it has a history; a task without one (a
// new task) still starts empty.
func TestPurgedChangelogWithHistoryRefused(t *testing.T) {
	e, ctx := newEnv(t), testContext(t)
	_, last := commitFive(t, e)
	if err := e.log.Stream().Purge(ctx, jetstream.WithPurgeSubject(e.log.Subject("t"))); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name    string
		history restore.History
		lost    bool
	}{
		{"no history", restore.History{}, false},
		{"earlier epoch", restore.History{Epoch: 1}, true},
		{"known sequence", restore.History{Seq: last}, true},
		{"committed at its first epoch", restore.History{Committed: true, Current: 1}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := memStore(t)
			_, err := restore.New(e.log, store, restore.Options{Task: "t", History: c.history}).Run(ctx)
			if c.lost != errors.Is(err, restore.ErrLost) || (!c.lost && err != nil) {
				t.Fatalf("Run with history %+v = %v, want lost %v", c.history, err, c.lost)
			}
			if c.history.Current > 0 && !strings.Contains(err.Error(), fmt.Sprintf("at epoch %d", c.history.Current)) {
				t.Fatalf("Run with history %+v = %v, want it to name epoch %d", c.history, err, c.history.Current)
			}
			if _, ok, err := store.Meta("t"); ok || err != nil {
				t.Fatalf("Meta after Run = ok %v, %v; want nothing", ok, err)
			}
		})
	}
}

// A history changes nothing while the changelog holds the task.
func TestHistoryWithChangelogRestores(t *testing.T) {
	e, ctx := newEnv(t), testContext(t)
	w, last := commitFive(t, e)
	store := memStore(t)
	if _, err := restore.New(e.log, store, restore.Options{Task: "t", History: restore.History{Epoch: 3, Seq: last}}).Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	requireSameState(t, store, w.store, "t")
}

// A snapshot holds the task's history even when its changelog was purged
// whole: the restore loads it rather than refusing.
func TestHistoryInSnapshotAfterPurge(t *testing.T) {
	e, ctx := newEnv(t), testContext(t)
	b := openBucket(t, e)
	w := &writer{log: e.log, store: memStore(t), task: "t"}
	snapshotHistory(t, e, b, w, 10, snapshot.Retention{Keep: 1, Margin: 5}, 9)
	if err := e.log.Stream().Purge(ctx, jetstream.WithPurgeSubject(e.log.Subject("t"))); err != nil {
		t.Fatal(err)
	}
	fresh := memStore(t)
	r := restore.New(e.log, fresh, restore.Options{Task: "t", Snapshots: b, History: restore.History{Epoch: 1}})
	if _, err := r.Run(ctx); err != nil {
		t.Fatalf("Run with a snapshot of a purged task: %v", err)
	}
	requireSameState(t, fresh, w.store, "t")
}

package httpapitest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

var (
	_ httpapi.Backend = (*httpapitest.Backend)(nil)
	_ httpapi.Backend = httpapitest.New()
)

// A released task leaves the view and keeps its state; Move brings it back
// with it. A commit changes the state, not the view.
func TestReleaseKeepsStateForMove(t *testing.T) {
	ctx := context.Background()
	b := httpapitest.New()
	b.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	v := b.Assignment().Version
	if _, err := b.Commit(ctx, "t1", api.CommitRequest{Epoch: 1, Puts: []api.KV{{Key: []byte("k"), Value: []byte("1")}}, Checkpoint: []byte("c1")}); err != nil {
		t.Fatal(err)
	}
	if got := b.Assignment().Version; got != v {
		t.Errorf("a commit moved the view from version %d to %d", v, got)
	}
	if _, err := b.Release(ctx, "t1", 1); !errors.Is(err, api.ErrNotRevoked) {
		t.Errorf("release of a task not revoked = %v, want ErrNotRevoked", err)
	}
	b.Revoke("t1")
	if _, err := b.Release(ctx, "t1", 1); err != nil {
		t.Fatal(err)
	}
	if tasks := b.Assignment().Tasks; len(tasks) != 0 || !b.Released("t1") {
		t.Errorf("after the release: view tasks %+v, released %v; want none, true", tasks, b.Released("t1"))
	}
	if _, err := b.Get("t1", []byte("k")); !errors.Is(err, api.ErrUnknownTask) {
		t.Errorf("read of a released task = %v, want ErrUnknownTask", err)
	}
	b.Move("t1", api.RoleActive, 2)
	if v, ok := b.Value("t1", "k"); !ok || v != "1" || string(b.Checkpoint("t1")) != "c1" {
		t.Errorf("after Move: k = %q (%v), checkpoint %q; want the state kept", v, ok, b.Checkpoint("t1"))
	}
	if got, want := b.Ops(), []string{"commit t1 c1", "release t1"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Ops = %q, want %q", got, want)
	}
}

package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
)

// releaseAgent is an Agent with just what Release and keepReleasesLocked
// use, at generation gen.
func releaseAgent(gen uint64, tasks ...*task) *Agent {
	a := &Agent{
		opts:       Options{Group: "g", MemberID: "m1"},
		tasks:      map[string]*task{},
		releases:   map[string]assign.Release{},
		changed:    make(chan struct{}),
		generation: gen,
	}
	kinds := map[string]bool{}
	for _, t := range tasks {
		kinds[t.id] = t.stateful
		a.tasks[t.id] = t
	}
	a.conf.Store(&groupConfig{kinds: kinds})
	return a
}

// TestReleaseNamesItsGeneration: a release is stamped with the generation
// whose revoke it answers, so that the leader never takes it for the
// answer to a revoke issued later.
func TestReleaseNamesItsGeneration(t *testing.T) {
	tk := &task{id: "s0", stateful: true, phase: phaseActive, epoch: 3, revoking: true, lastSeq: 42}
	a := releaseAgent(7, tk)
	if _, err := a.Release(context.Background(), "s0", 2); !errors.Is(err, api.ErrNotOwner) {
		t.Fatalf("release at a stale epoch = %v, want ErrNotOwner", err)
	}
	if len(a.releases) != 0 {
		t.Fatalf("a refused release was recorded: %+v", a.releases)
	}
	res, err := a.Release(context.Background(), "s0", 3)
	if err != nil {
		t.Fatal(err)
	}
	if res.Epoch != 3 || res.Seq != 42 {
		t.Errorf("release = %+v, want epoch 3, seq 42", res)
	}
	if r := a.releases["s0"]; r.Epoch != 3 || r.Seq != 42 || r.Generation != 7 {
		t.Errorf("recorded release %+v, want epoch 3, seq 42, generation 7", r)
	}
}

// TestKeepReleases: releases of tasks still revoked are kept, and those
// whose worker has not served the task since are stamped with the new
// generation (a revoke issued again after a cancel this member skipped);
// the others are dropped.
func TestKeepReleases(t *testing.T) {
	released := &task{id: "a", stateful: true, phase: phaseReleased, epoch: 3, revoking: true}
	served := &task{id: "b", stateful: true, phase: phaseActive, epoch: 3, revoking: true} // served again since
	notRevoked := &task{id: "c", stateful: true, phase: phaseReleased, epoch: 3}
	a := releaseAgent(9, released, served, notRevoked)
	for _, id := range []string{"a", "b", "c", "gone"} {
		a.releases[id] = assign.Release{Epoch: 3, Seq: 10, Generation: 5}
	}
	want := map[string]desired{
		"a": {role: api.RoleActive, epoch: 3, revoking: true},
		"b": {role: api.RoleActive, epoch: 3, revoking: true},
		"c": {role: api.RoleActive, epoch: 3},
	}
	a.keepReleasesLocked(want, 9)
	if r, ok := a.releases["a"]; !ok || r.Generation != 9 {
		t.Errorf("release of a = %+v, %v; want kept at generation 9", r, ok)
	}
	if r, ok := a.releases["b"]; !ok || r.Generation != 5 {
		t.Errorf("release of b = %+v, %v; want kept at generation 5 (its worker served the task since)", r, ok)
	}
	for _, id := range []string{"c", "gone"} {
		if r, ok := a.releases[id]; ok {
			t.Errorf("release of %s = %+v kept, want it dropped", id, r)
		}
	}
}

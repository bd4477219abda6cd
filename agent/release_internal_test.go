package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
)

// releaseAgent is an Agent with just what Release and keepLocked
// use, at generation gen.
func releaseAgent(gen uint64, tasks ...*task) *Agent {
	a := &Agent{
		opts:       Options{Group: "g", MemberID: "m1"},
		tasks:      map[string]*task{},
		changed:    make(chan struct{}),
		generation: gen,
		metrics:    newMetrics(nil),
	}
	kinds := map[string]bool{}
	for _, t := range tasks {
		kinds[t.id] = t.stateful
		a.tasks[t.id] = t
	}
	a.conf.Store(&groupConfig{kinds: kinds})
	return a
}

// releases returns the releases a's member record would carry.
func (a *Agent) releases() map[string]assign.Release {
	out := map[string]assign.Release{}
	for id, t := range a.tasks {
		if t.release != nil {
			out[id] = *t.release
		}
	}
	return out
}

// toNobody is a revoke through the leader.
var toNobody = &revokeOrder{target: ""}

// TestReleaseNamesItsGeneration: a release is stamped with the generation
// whose revoke it answers, so that the leader never takes it for the
// answer to a revoke issued later.
func TestReleaseNamesItsGeneration(t *testing.T) {
	tk := &task{id: "s0", stateful: true, phase: phaseActive, epoch: 3, revoke: toNobody, lastSeq: 42}
	a := releaseAgent(7, tk)
	if _, err := a.Release(context.Background(), "s0", 2); !errors.Is(err, api.ErrNotOwner) {
		t.Fatalf("release at a stale epoch = %v, want ErrNotOwner", err)
	}
	if len(a.releases()) != 0 {
		t.Fatalf("a refused release was recorded: %+v", a.releases())
	}
	res, err := a.Release(context.Background(), "s0", 3)
	if err != nil {
		t.Fatal(err)
	}
	if res.Epoch != 3 || res.Seq != 42 {
		t.Errorf("release = %+v, want epoch 3, seq 42", res)
	}
	if r := a.releases()["s0"]; r.Epoch != 3 || r.Seq != 42 || r.Generation != 7 || r.To != "" {
		t.Errorf("recorded release %+v, want epoch 3, seq 42, generation 7, through the leader", r)
	}
}

// TestKeepReleases: a release through the leader of a task still revoked is
// kept, and stamped with the new generation if the worker has not served
// the task since (a revoke issued again after a cancel this member
// skipped); one of a task no longer revoked is dropped; a direct release
// stands, whatever the revoke, until the generation moves the task on.
func TestKeepReleases(t *testing.T) {
	r := func() *assign.Release { return &assign.Release{Epoch: 3, Seq: 10, Generation: 5} }
	released := &task{id: "a", stateful: true, phase: phaseReleased, epoch: 3, revoke: toNobody, release: r()}
	served := &task{id: "b", stateful: true, phase: phaseActive, epoch: 3, revoke: toNobody, release: r()} // served again since
	notRevoked := &task{id: "c", stateful: true, phase: phaseReleased, epoch: 3, release: r()}
	direct := &task{id: "d", stateful: true, phase: phaseReleased, epoch: 3,
		release: &assign.Release{Epoch: 3, Seq: 11, Generation: 5, To: "m2", ToEpoch: 4}}
	a := releaseAgent(9, released, served, notRevoked, direct)
	a.keepLocked(released, desired{role: api.RoleActive, epoch: 3, revoke: toNobody}, 9)
	a.keepLocked(served, desired{role: api.RoleActive, epoch: 3, revoke: toNobody}, 9)
	a.keepLocked(notRevoked, desired{role: api.RoleActive, epoch: 3}, 9)
	a.keepLocked(direct, desired{role: api.RoleActive, epoch: 3}, 9) // its revoke cancelled meanwhile
	got := a.releases()
	if r, ok := got["a"]; !ok || r.Generation != 9 {
		t.Errorf("release of a = %+v, %v; want kept at generation 9", r, ok)
	}
	if r, ok := got["b"]; !ok || r.Generation != 5 {
		t.Errorf("release of b = %+v, %v; want kept at generation 5 (its worker served the task since)", r, ok)
	}
	if r, ok := got["c"]; ok {
		t.Errorf("release of c = %+v kept, want it dropped", r)
	}
	if r, ok := got["d"]; !ok || r.To != "m2" || r.Generation != 5 {
		t.Errorf("direct release of d = %+v, %v; want it kept as it was", r, ok)
	}
	a.keepLocked(direct, desired{role: api.RoleActive, epoch: 4}, 10)
	if r, ok := a.releases()["d"]; ok {
		t.Errorf("direct release of d = %+v kept once the task is at the successor's epoch, want it dropped", r)
	}
}

package client

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

// prepared is what the tests' PrepareFunc makes: it records how its
// preparation ended and whether it was closed.
type prepared struct {
	info   PrepareInfo
	cause  error // why the preparation's context ended, when it waited for that
	closed atomic.Int32
}

func (p *prepared) Close() error {
	p.closed.Add(1)
	return nil
}

// TestRunPreparesLearnersAndStandbys: a stateful learner or standby is
// prepared once; when it becomes active while its prepare still runs, the
// prepare's context ends (the task is active) and the task function's
// first run gets what it returned, a restart nothing; a preparation whose
// task leaves is closed; a stateless task is not prepared.
func TestRunPreparesLearnersAndStandbys(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleLearner, Epoch: 1})
	agent.Set("t2", httpapitest.Task{Role: api.RoleStandby, Epoch: 1})
	agent.Set("t3", httpapitest.Task{Role: api.RoleLearner, Epoch: 1, Stateless: true})
	made := make(chan *prepared, 10)
	prepare := func(ctx context.Context, info PrepareInfo) (any, error) {
		p := &prepared{info: info}
		made <- p
		if info.ID == "t1" {
			<-ctx.Done() // still preparing when the task becomes active
			p.cause = context.Cause(ctx)
		}
		return p, nil
	}
	runs := make(chan any, 10)
	var calls atomic.Int32
	h := startRunOpts(t, agent, func(ctx context.Context, task Task) error {
		runs <- task.Prepared
		if calls.Add(1) == 1 {
			return errors.New("first run fails")
		}
		<-ctx.Done()
		return nil
	}, nil, RunOptions{Prepare: prepare})

	p1 := h.expect("t1", EventPrepare)[0]
	if p1.Role != api.RoleLearner || p1.Epoch != 1 {
		t.Errorf("prepare event of t1 = %+v, want role learner, epoch 1", p1)
	}
	h.expect("t2", EventPrepare)
	got := map[string]*prepared{}
	for range 2 {
		p := <-made
		got[p.info.ID] = p
	}
	if got["t1"] == nil || got["t2"] == nil || got["t2"].info.Role != api.RoleStandby {
		t.Fatalf("prepared %v, want t1 as a learner and t2 as a standby", got)
	}

	agent.Move("t1", api.RoleActive, 2)
	h.expect("t1", EventStart, EventRestart, EventStart)
	if first := <-runs; first != got["t1"] {
		t.Errorf("the first run of t1 got Prepared = %v, want what its prepare returned", first)
	}
	if second := <-runs; second != nil {
		t.Errorf("the restart of t1 got Prepared = %v, want nil: the first run owns it", second)
	}
	if !errors.Is(got["t1"].cause, errBecameActive) {
		t.Errorf("t1's prepare ended with cause %v, want %v", got["t1"].cause, errBecameActive)
	}

	agent.Remove("t2")
	h.expect("t2", EventDiscard)
	if n := got["t2"].closed.Load(); n != 1 {
		t.Errorf("t2's preparation closed %d times when t2 left, want once", n)
	}
	if n := got["t1"].closed.Load(); n != 0 {
		t.Errorf("t1's preparation closed %d times, want 0: it is the task function's", n)
	}
	select {
	case p := <-made:
		t.Errorf("prepared %s (stateless or again), want no other preparation", p.info.ID)
	default:
	}
}

// TestRunPrepareFailureStartsUnprepared: a prepare that fails only means
// the task function starts without a preparation.
func TestRunPrepareFailureStartsUnprepared(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleLearner, Epoch: 1})
	runs := make(chan any, 1)
	h := startRunOpts(t, agent, func(ctx context.Context, task Task) error {
		runs <- task.Prepared
		<-ctx.Done()
		return nil
	}, nil, RunOptions{Prepare: func(context.Context, PrepareInfo) (any, error) {
		return &prepared{}, errors.New("no input today")
	}})
	h.expect("t1", EventPrepare)
	agent.Move("t1", api.RoleActive, 2)
	h.expect("t1", EventStart)
	if p := <-runs; p != nil {
		t.Errorf("Prepared = %v after a failed prepare, want nil", p)
	}
}

// TestRunClosesPreparationsWhenItEnds: Run closes the preparations no task
// function took before it returns.
func TestRunClosesPreparationsWhenItEnds(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleStandby, Epoch: 1})
	p := &prepared{}
	h := startRunOpts(t, agent, finalCommit, nil, RunOptions{Prepare: func(context.Context, PrepareInfo) (any, error) {
		return p, nil
	}})
	h.expect("t1", EventPrepare)
	h.cancel()
	if err := h.wait(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if n := p.closed.Load(); n != 1 {
		t.Errorf("the preparation was closed %d times when Run ended, want once", n)
	}
}

// closesNil is a preparation whose Close fails on a nil receiver, as a
// nil pointer of a reader type's would.
type closesNil struct{ closed atomic.Int32 }

func (c *closesNil) Close() error {
	c.closed.Add(1) // panics on a nil *closesNil
	return nil
}

// TestRunIgnoresWhatAFailedPrepareReturned: a prepare that fails returns a
// value beside its error (here a nil pointer of a closer type, which a
// worker returning its constructor's results gives); when the task leaves
// without becoming active, the runner neither hands it over nor closes it.
func TestRunIgnoresWhatAFailedPrepareReturned(t *testing.T) {
	agent := httpapitest.New()
	agent.Set("t1", httpapitest.Task{Role: api.RoleLearner, Epoch: 1})
	h := startRunOpts(t, agent, finalCommit, nil, RunOptions{Prepare: func(context.Context, PrepareInfo) (any, error) {
		var c *closesNil
		return c, errors.New("no input today")
	}})
	h.expect("t1", EventPrepare)
	agent.Remove("t1")
	h.expect("t1", EventDiscard)
	h.cancel()
	if err := h.wait(); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

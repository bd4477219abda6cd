package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/handoffhq/handoff/api"
)

// PrepareInfo is a stateful task that is a learner or standby on this
// member, as a PrepareFunc sees it.
type PrepareInfo struct {
	ID    string
	Role  string // api.RoleLearner or api.RoleStandby
	Epoch uint64
	// Checkpoint and Seq are what this member's copy has applied, when the
	// agent gives them: a hint of where the task's input will resume. The
	// task's real start is the checkpoint of its activation
	// (Task.Checkpoint), at or after the hint, often further on.
	Checkpoint []byte
	Seq        uint64
}

// PrepareFunc readies a task's input while the task is a learner or
// standby here (a connection, a consumer positioned at the hint and
// reading ahead), so that the task function processes at once when the
// task becomes active. What it returns is handed to the task function as
// Task.Prepared on the first run after the task became active here, which
// owns it from then on. It is called once per stay of the task here
// (learner to standby is the same stay), in a goroutine of its own, so it
// never delays the runner; an error only means that the task function
// starts unprepared, and what PrepareFunc returned with it is neither
// handed over nor closed (a typed nil pointer would not survive Close).
//
// ctx ends when the task leaves this member without becoming active here,
// when Run ends, or when the task becomes active here before PrepareFunc
// returned: then the task function waits for what it returns, so it should
// return promptly. A value that is not handed to a task function (the
// task left, or PrepareFunc returned after the task was stopped) is closed
// if it is an io.Closer.
type PrepareFunc func(ctx context.Context, info PrepareInfo) (any, error)

// errBecameActive is the cause of a preparation's context that ends
// because its task became active here first.
var errBecameActive = errors.New("the task became active here before its prepare returned")

// errLeft is the cause of a preparation's context that ends because its
// task left this member without becoming active here, or Run ended.
var errLeft = errors.New("the task left this member without becoming active here")

// preparation is a PrepareFunc call in flight or done, for a task not yet
// active here. Its goroutine sets value and err, then closes done.
type preparation struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
	value  any
	err    error
}

// prepareAll calls opts.Prepare for each stateful task that is a learner
// or standby in v and has no preparation yet, and discards the
// preparations of tasks that left without becoming active here (a task
// started here has taken its preparation already). Only Run's goroutine
// calls it.
func (r *runner) prepareAll(ctx context.Context, v api.View, revoked map[string]bool) {
	here := make(map[string]bool, len(v.Tasks))
	for _, tv := range v.Tasks {
		here[tv.ID] = true
	}
	for id := range r.preparations {
		if !here[id] || revoked[id] {
			r.discard(id)
		}
	}
	if r.opts.Prepare == nil || r.closing {
		return
	}
	for _, tv := range v.Tasks {
		if !tv.Stateful || (tv.Role != api.RoleLearner && tv.Role != api.RoleStandby) {
			continue
		}
		if _, ok := r.preparations[tv.ID]; ok {
			continue
		}
		if _, running := r.tasks[tv.ID]; running {
			continue // still stopping after it moved: it is prepared on its next view
		}
		info := PrepareInfo{ID: tv.ID, Role: tv.Role, Epoch: tv.Epoch, Checkpoint: tv.Checkpoint, Seq: tv.Seq}
		pctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		p := &preparation{cancel: cancel, done: make(chan struct{})}
		r.preparations[tv.ID] = p
		r.emit(Event{Type: EventPrepare, Task: tv.ID, Epoch: tv.Epoch, Role: tv.Role, Checkpoint: tv.Checkpoint, Seq: tv.Seq})
		r.log.Debug().Str(fieldTask, tv.ID).Str("role", tv.Role).Msg("preparing the task's input")
		r.bg.Add(1)
		go func() {
			defer r.bg.Done()
			defer close(p.done)
			v, err := r.callPrepare(pctx, info)
			if err != nil {
				v = nil // a failed preparation hands over nothing and closes nothing
			}
			p.value, p.err = v, err
		}()
	}
}

// callPrepare runs opts.Prepare, turning a panic into an error.
func (r *runner) callPrepare(ctx context.Context, info PrepareInfo) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("prepare panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return r.opts.Prepare(ctx, info)
}

// discard ends the preparation of task id and closes what it made, once
// it has returned, in the background. Only Run's goroutine calls it.
func (r *runner) discard(id string) {
	p, ok := r.preparations[id]
	if !ok {
		return
	}
	delete(r.preparations, id)
	p.cancel(errLeft)
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		<-p.done
		r.dispose(id, p.value)
		r.emit(Event{Type: EventDiscard, Task: id})
		r.log.Debug().Str(fieldTask, id).Msg("discarded the task's preparation: it left without becoming active here")
	}()
}

// takePreparation hands task id's preparation, if any, to its supervisor.
// Only Run's goroutine calls it.
func (r *runner) takePreparation(id string) *preparation {
	p := r.preparations[id]
	delete(r.preparations, id)
	return p
}

// dispose closes what a preparation made, if it is an io.Closer.
func (r *runner) dispose(id string, v any) {
	c, ok := v.(io.Closer)
	if !ok {
		return
	}
	if err := c.Close(); err != nil {
		r.log.Warn().Err(err).Str(fieldTask, id).Msg("close the task's preparation")
	}
}

// takePrepared returns what the task's preparation made, for the first run
// of the task function. A preparation still running has its context ended
// (the task is active now: it should return at once) and is waited for,
// unless the task is stopped first: then what it makes is closed.
func (s *supervisor) takePrepared() any {
	p := s.prep
	s.prep = nil
	if p == nil {
		return nil
	}
	p.cancel(errBecameActive)
	select {
	case <-p.done:
	case <-s.ctx.Done():
		s.r.bg.Add(1)
		go func() {
			defer s.r.bg.Done()
			<-p.done
			s.r.dispose(s.tv.ID, p.value)
		}()
		return nil
	}
	if p.err != nil {
		s.log.Warn().Err(p.err).Msg("the task's prepare failed: the task function starts without it")
		return nil
	}
	return p.value
}

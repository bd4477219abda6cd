package lab

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/handoffhq/handoff/agent/group"
)

// ErrNoMember is wrapped by the errors of operations on a member the lab
// does not have, or that is not in the state the operation needs.
var ErrNoMember = errors.New("lab: no such member")

// AddMember starts a new member with its own data directory. It returns
// once the member's agent, API and worker run; joining the group follows.
func (l *Lab) AddMember(ctx context.Context, id string) (*Member, error) {
	ms, err := l.AddMembers(ctx, id)
	if err != nil {
		return nil, err
	}
	return ms[0], nil
}

// AddMembers starts new members together: it opens every one, then starts
// them all at once, so that the group's first plan is likely to see them
// all and each restores only its share of the tasks.
func (l *Lab) AddMembers(ctx context.Context, ids ...string) ([]*Member, error) {
	for _, id := range ids {
		if !group.ValidMemberID(id) {
			return nil, fmt.Errorf("lab: member ID %q: use letters, digits, '-' or '_'", id)
		}
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.New("lab: closed")
	}
	ms := make([]*Member, len(ids))
	for i, id := range ids {
		if _, ok := l.members[id]; ok {
			l.mu.Unlock()
			return nil, fmt.Errorf("lab: member %s exists; restart it instead", id)
		}
		ms[i] = &Member{ID: id, Dir: filepath.Join(l.dir, "members", id), lab: l}
	}
	for _, m := range ms {
		l.members[m.ID] = m
	}
	l.mu.Unlock()

	// Processes are opened all at once: each agent takes a while to start,
	// and they should join the group together.
	incs := make([]*incarnation, len(ms))
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		if l.opts.Processes == nil {
			incs[i], errs[i] = m.open(ctx)
			if errs[i] != nil {
				break
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			incs[i], errs[i] = m.open(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, opened := range incs {
			if opened != nil {
				opened.abort()
			}
		}
		l.mu.Lock()
		for _, m := range ms {
			delete(l.members, m.ID)
		}
		l.mu.Unlock()
		return nil, err
	}
	for i, m := range ms {
		l.rec.mark(Mark{Kind: MarkJoin, Member: m.ID})
		m.run(incs[i])
	}
	return ms, nil
}

// Member returns member id, or nil.
func (l *Lab) Member(id string) *Member {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.members[id]
}

// Members returns every member the lab has started, running or not, in
// natural ID order.
func (l *Lab) Members() []*Member {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sortedMembersLocked()
}

// running returns the member id if it runs.
func (l *Lab) running(id string) (*Member, *incarnation, error) {
	m := l.Member(id)
	if m == nil {
		return nil, nil, fmt.Errorf("member %s: %w", id, ErrNoMember)
	}
	m.mu.RLock()
	inc := m.inc
	m.mu.RUnlock()
	if inc == nil {
		return nil, nil, fmt.Errorf("member %s is %s: %w", id, m.State(), ErrNoMember)
	}
	return m, inc, nil
}

// Leave starts member id's graceful leave the way an operator does: POST
// /leave on its HTTP API. The member hands its tasks over and stops by
// itself once the agent says shutdown; WaitStopped waits for that.
func (l *Lab) Leave(ctx context.Context, id string) error {
	m, inc, err := l.running(id)
	if err != nil {
		return err
	}
	l.rec.mark(Mark{Kind: MarkLeave, Member: id})
	if _, err := inc.client.Leave(ctx); err != nil {
		return fmt.Errorf("lab: POST /leave on %s: %w", id, err)
	}
	m.mu.Lock()
	if m.inc == inc {
		m.state = MemberLeaving
	}
	m.mu.Unlock()
	return nil
}

// WaitStopped waits until member id's current incarnation has stopped
// (after a leave, a crash or a stop), or ctx ends.
func (l *Lab) WaitStopped(ctx context.Context, id string) error {
	m := l.Member(id)
	if m == nil {
		return fmt.Errorf("member %s: %w", id, ErrNoMember)
	}
	m.mu.RLock()
	inc := m.inc
	m.mu.RUnlock()
	if inc == nil {
		return nil
	}
	select {
	case <-inc.ended:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lab: wait for %s to stop: %w", id, ctx.Err())
	}
}

// Crash stops member id the way kill -9 does, as far as the group can
// tell: its NATS connection drops first, then its agent, API and worker
// stop without any cleanup, so its record and tasks stay until its session
// expires. Its data directory stays for a Restart.
func (l *Lab) Crash(id string) error {
	m, inc, err := l.running(id)
	if err != nil {
		return err
	}
	l.rec.mark(Mark{Kind: MarkCrash, Member: id})
	return m.teardown(inc, false, MemberCrashed)
}

// Stop stops member id gracefully without a leave: its worker stops, then
// its agent, whose record is deleted so that the group fails its tasks over
// at once. A member run as processes (Processes) is killed instead, worker
// first: its record expires with the session timeout.
func (l *Lab) Stop(id string) error {
	m, _, err := l.running(id)
	if err != nil {
		return err
	}
	l.rec.mark(Mark{Kind: MarkStop, Member: id})
	return m.stop()
}

// Restart starts a stopped, crashed or departed member again from its data
// directory: its agent reports the local state it kept.
func (l *Lab) Restart(ctx context.Context, id string) error {
	m := l.Member(id)
	if m == nil {
		return fmt.Errorf("member %s: %w", id, ErrNoMember)
	}
	if st := m.State(); st == MemberRunning || st == MemberLeaving {
		return fmt.Errorf("lab: member %s is %s; stop it first", id, st)
	}
	l.rec.mark(Mark{Kind: MarkRestart, Member: id})
	return m.start(ctx)
}

// ActivationReplayed sums ActivationReplayed over every member.
func (l *Lab) ActivationReplayed() float64 {
	var v float64
	for _, m := range l.Members() {
		v += m.ActivationReplayed()
	}
	return v
}

// DirectTakeovers sums every member's DirectTakeovers.
func (l *Lab) DirectTakeovers() float64 {
	var v float64
	for _, m := range l.Members() {
		v += m.DirectTakeovers()
	}
	return v
}

package agent_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/record"
)

// The direct hand-off and its faults, one test per case docs/ARCHITECTURE.md
// names ("The direct hand-off"). Each starts m1 and m2 with six stateful
// tasks and no workers, then m3: the leader revokes tasks to m3 with direct
// revokes, which wait for the test's release (the release timeout is long).

func directCluster(t *testing.T) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("a group of three agents")
	}
	cfg := testConfig("s0..5", "")
	cfg.ReleaseTimeout = cfgDuration(time.Minute) // every move waits for the test's release
	c := newCluster(t, cfg)
	c.start("m1")
	c.start("m2")
	poll.Eventually(t, 20*time.Second, "m1 and m2 owning the tasks", func() error {
		c.releaseRevoked("m1") // the moves to m2, as a worker would
		gv := c.view()
		if err := balanced(gv, "m1", "m2"); err != nil {
			return err
		}
		return c.activeEverywhere(gv)
	})
	c.start("m3")
	return c
}

// releaseRevoked releases every task member id's agent shows under revoke.
func (c *cluster) releaseRevoked(id string) {
	a := c.members[id].a
	for _, task := range a.Assignment().Revoke {
		if _, err := a.Release(context.Background(), task, 0); err != nil {
			c.t.Logf("release %s on %s: %v", task, id, err)
		}
	}
}

// handOver releases rv's task on its owner, as its worker would, and
// waits for m3 to serve it at the revoke's epoch.
func (c *cluster) handOver(rv revoke) {
	c.t.Helper()
	if _, err := c.members[rv.owner].a.Release(context.Background(), rv.task, rv.epoch); err != nil {
		c.t.Fatal(err)
	}
	poll.Eventually(c.t, 10*time.Second, "m3 serving "+rv.task, func() error {
		if e, ok := c.activeAt("m3", rv.task); !ok || e != rv.next {
			return fmt.Errorf("m3 shows %s active %v at epoch %d, want epoch %d", rv.task, ok, e, rv.next)
		}
		return nil
	})
}

// revoke is a pending direct revoke of a task.
type revoke struct {
	task, owner string
	epoch, next uint64 // the owner's, and the one the revoke gives its target
}

// revokedTo waits for a task that is being revoked from one of owners to
// target with a direct revoke, and that the owner's agent shows under
// revoke, and returns it.
func (c *cluster) revokedTo(target string, owners ...string) revoke {
	c.t.Helper()
	var rv revoke
	poll.Eventually(c.t, 30*time.Second, "a direct revoke to "+target, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, as, err := group.ReadAssignment(ctx, c.kv)
		if err != nil {
			return err
		}
		for _, id := range slices.Sorted(maps.Keys(as.Tasks)) {
			ta := as.Tasks[id]
			if ta.Revoke == nil || ta.Revoke.Target != target || ta.Revoke.Epoch == 0 || !slices.Contains(owners, ta.Active) {
				continue
			}
			if m := c.members[ta.Active]; m.a != nil && slices.Contains(m.a.Assignment().Revoke, id) {
				rv = revoke{task: id, owner: ta.Active, epoch: ta.Epoch, next: ta.Revoke.Epoch}
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
	return rv
}

// revokedFromAFollower waits for a direct revoke to m3 of a task that a
// member other than the leader owns, makes three commits of it (keys a0..),
// and returns the leader and the revoke.
func (c *cluster) revokedFromAFollower() (string, revoke) {
	c.t.Helper()
	leader, err := c.leader()
	if err != nil {
		c.t.Fatal(err)
	}
	others := slices.DeleteFunc([]string{"m1", "m2"}, func(id string) bool { return id == leader })
	rv := c.revokedTo("m3", others...)
	c.commits(rv.owner, rv.task, "a", 3)
	return leader, rv
}

// commits makes n commits of task on member id, keys prefix0.., and
// returns the last one's sequence.
func (c *cluster) commits(id, task, prefix string, n int) uint64 {
	c.t.Helper()
	var last uint64
	for i := range n {
		res, err := c.members[id].a.Commit(context.Background(), task, api.CommitRequest{
			Puts: []api.KV{{Key: fmt.Appendf(nil, "%s%d", prefix, i), Value: []byte("v")}}, Checkpoint: fmt.Appendf(nil, "%s%d", prefix, i)})
		if err != nil {
			c.t.Fatalf("commit %d of %s on %s: %v", i, task, id, err)
		}
		last = res.Seq
	}
	return last
}

// activeAt returns the epoch at which member id's worker sees task active,
// and whether it does.
func (c *cluster) activeAt(id, task string) (uint64, bool) {
	m := c.members[id]
	if m == nil || m.a == nil {
		return 0, false
	}
	for _, tv := range m.a.Assignment().Tasks {
		if tv.ID == task && tv.Role == api.RoleActive {
			return tv.Epoch, true
		}
	}
	return 0, false
}

// recorded returns the owner and epoch of task in the published
// generation.
func (c *cluster) recorded(task string) (string, uint64) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, as, err := group.ReadAssignment(ctx, c.kv)
	if err != nil {
		c.t.Fatalf("read the assignment: %v", err)
	}
	ta := as.Tasks[task]
	if ta == nil {
		return "", 0
	}
	return ta.Active, ta.Epoch
}

// chain reads task's changelog, fails the test on any break of its one
// writer chain, and returns it.
func (c *cluster) chain(task string) (record.Chain, []changelog.Record) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := changelog.ReadTask(ctx, c.js, c.group, task)
	if err != nil {
		c.t.Fatal(err)
	}
	ch := record.CheckChain(task, recs)
	for _, v := range ch.Violations {
		c.t.Errorf("%s: %s", task, v)
	}
	return ch, recs
}

// hasKeys fails the test unless member id's copy of task holds
// prefix0..prefix<n-1>.
func (c *cluster) hasKeys(id, task, prefix string, n int) {
	c.t.Helper()
	for i := range n {
		if v, err := c.members[id].a.Get(task, fmt.Appendf(nil, "%s%d", prefix, i)); err != nil || string(v) != "v" {
			c.t.Errorf("%s's %s lacks %s%d: %q, %v", id, task, prefix, i, v, err)
		}
	}
}

// TestDirectHandoff: the successor serves the task from the release entry
// alone, before any generation records the hand-off; its first commit
// follows the entry, and the leader then records the hand-off at the
// revoke's epoch.
func TestDirectHandoff(t *testing.T) {
	c := directCluster(t)
	rv := c.revokedTo("m3", "m1", "m2")
	c.commits(rv.owner, rv.task, "a", 3)
	c.handOver(rv)
	c.hasKeys("m3", rv.task, "a", 3)
	c.commits("m3", rv.task, "b", 2)
	if _, err := c.members[rv.owner].a.Commit(context.Background(), rv.task, api.CommitRequest{}); !errors.Is(err, api.ErrNotOwner) {
		t.Errorf("the old owner's commit after its release = %v, want ErrNotOwner", err)
	}
	poll.Eventually(t, 10*time.Second, "the hand-off recorded", func() error {
		if owner, epoch := c.recorded(rv.task); owner != "m3" || epoch != rv.next {
			return fmt.Errorf("%s on %s at epoch %d", rv.task, owner, epoch)
		}
		return nil
	})
	_, recs := c.chain(rv.task)
	tail := recs[len(recs)-3:]
	if rel := tail[0].Entry; rel.Kind != changelog.KindRelease || rel.Successor != "m3" || rel.Epoch != rv.next ||
		tail[1].Entry.Kind != changelog.KindCommit || tail[2].Entry.Kind != changelog.KindCommit {
		t.Errorf("%s's changelog ends with %v, %v, %v; want the release entry to m3 at epoch %d, then m3's two commits and no marker",
			rv.task, tail[0].Entry, tail[1].Entry.Kind, tail[2].Entry.Kind, rv.next)
	}
}

// TestDirectHandoffSuccessorDies: the successor dies between the release
// entry and its takeover. The release is final; the task fails over from
// the dead successor, at an epoch above the entry's, within the session
// timeout, with every commit.
func TestDirectHandoffSuccessorDies(t *testing.T) {
	c := directCluster(t)
	rv := c.revokedTo("m3", "m1", "m2")
	c.commits(rv.owner, rv.task, "a", 3)
	c.crash("m3")
	released := time.Now()
	if _, err := c.members[rv.owner].a.Release(context.Background(), rv.task, rv.epoch); err != nil {
		t.Fatal(err)
	}
	session := c.cfg.SessionTimeout.D()
	var owner string
	poll.Eventually(t, session+10*time.Second, rv.task+" served again", func() error {
		for _, id := range []string{"m1", "m2"} {
			if e, ok := c.activeAt(id, rv.task); ok && e > rv.next {
				owner = id
				return nil
			}
		}
		return fmt.Errorf("not yet")
	})
	t.Logf("%s served again by %s %s after its release to the dead successor (session timeout %s)", rv.task, owner, time.Since(released).Round(time.Millisecond), session)
	c.hasKeys(owner, rv.task, "a", 3)
	c.commits(owner, rv.task, "b", 1)
	c.chain(rv.task)
}

// TestDirectHandoffWithoutLeader: the leader dies after it published the
// revoke. The successor takes the task over with no leader alive, and the
// next leader records the hand-off at the revoke's epoch: no failover of
// the task.
func TestDirectHandoffWithoutLeader(t *testing.T) {
	c := directCluster(t)
	leader, rv := c.revokedFromAFollower()
	c.crash(leader)
	if _, err := c.members[rv.owner].a.Release(context.Background(), rv.task, rv.epoch); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "m3 serving "+rv.task, func() error {
		if e, ok := c.activeAt("m3", rv.task); !ok || e != rv.next {
			return fmt.Errorf("m3 shows %s active %v at epoch %d", rv.task, ok, e)
		}
		return nil
	})
	if owner, epoch := c.recorded(rv.task); owner != rv.owner {
		t.Logf("the hand-off was recorded before the test looked (%s at %d): the leader died too late to prove anything", owner, epoch)
	}
	c.commits("m3", rv.task, "b", 2)
	poll.Eventually(t, c.cfg.SessionTimeout.D()+20*time.Second, "a new leader recording the hand-off", func() error {
		if l, err := c.leader(); err != nil || l == leader {
			return fmt.Errorf("leader %q, %v", l, err)
		}
		if owner, epoch := c.recorded(rv.task); owner != "m3" || epoch != rv.next {
			return fmt.Errorf("%s on %s at epoch %d", rv.task, owner, epoch)
		}
		return nil
	})
	c.hasKeys("m3", rv.task, "a", 3)
	c.chain(rv.task)
}

// TestDirectHandoffAcrossNATSRestart: a release while NATS is down is
// refused with nothing released; once it is back the release goes through
// and the successor takes over from the entry it tails after its
// reconnect. (A release whose entry landed although its acknowledgement
// was lost: TestReleaseEntryLandedWithoutAck.)
func TestDirectHandoffAcrossNATSRestart(t *testing.T) {
	c := directCluster(t)
	rv := c.revokedTo("m3", "m1", "m2")
	c.commits(rv.owner, rv.task, "a", 3)
	owner := c.members[rv.owner].a

	c.srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err := owner.Release(ctx, rv.task, rv.epoch)
	cancel()
	if !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("release with NATS down = %v, want ErrUnavailable", err)
	}
	if !slices.Contains(owner.Assignment().Revoke, rv.task) {
		t.Fatalf("after a refused release %s is not active under revoke on %s any more: %+v", rv.task, rv.owner, owner.Assignment())
	}
	c.srv.Resume(t)
	poll.Eventually(t, 30*time.Second, "the release after NATS is back", func() error {
		_, err := owner.Release(context.Background(), rv.task, rv.epoch)
		return err
	})
	poll.Eventually(t, 30*time.Second, "m3 serving "+rv.task, func() error {
		if e, ok := c.activeAt("m3", rv.task); !ok || e != rv.next {
			return fmt.Errorf("m3 shows %s active %v at epoch %d", rv.task, ok, e)
		}
		return nil
	})
	c.hasKeys("m3", rv.task, "a", 3)
	c.commits("m3", rv.task, "b", 1)
	c.chain(rv.task)

}

// TestDirectHandoffRevokeCancelled: the successor starts leaving just as
// the owner releases, so that the leader cancels the revoke before or
// after it sees the release (which of the two it sees first is up to the
// race; TestDirectHandoffs in agent/assign plans the cancel-first order
// deterministically). The release entry is final either way: the old owner
// never serves the task at its epoch again, and the task ends on a member
// that stays, at a higher epoch, with every commit. If the cancel reaches
// the owner before its release, the release is refused (not_revoked) and
// the owner keeps the task.
func TestDirectHandoffRevokeCancelled(t *testing.T) {
	c := directCluster(t)
	rv := c.revokedTo("m3", "m1", "m2")
	c.commits(rv.owner, rv.task, "a", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.members["m3"].a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := c.members[rv.owner].a.Release(ctx, rv.task, rv.epoch)
	if errors.Is(err, api.ErrNotRevoked) {
		t.Logf("the cancel reached %s before its release: it keeps %s", rv.owner, rv.task)
		c.commits(rv.owner, rv.task, "b", 1)
		c.chain(rv.task)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	var final string
	poll.Eventually(t, 30*time.Second, rv.task+" on a member that stays", func() error {
		c.releaseRevoked("m3") // what it owns moves away, as its worker would let it
		owner, epoch := c.recorded(rv.task)
		if owner == "m3" || owner == "" || epoch <= rv.epoch {
			return fmt.Errorf("%s on %q at epoch %d", rv.task, owner, epoch)
		}
		if e, ok := c.activeAt(owner, rv.task); !ok || e != epoch {
			return fmt.Errorf("%s recorded on %s at %d, its agent shows it at %d (%v)", rv.task, owner, epoch, e, ok)
		}
		final = owner
		return nil
	})
	c.hasKeys(final, rv.task, "a", 3)
	c.commits(final, rv.task, "b", 1)
	if e, ok := c.activeAt(rv.owner, rv.task); ok && e == rv.epoch {
		t.Errorf("%s serves %s at its released epoch %d again", rv.owner, rv.task, e)
	}
	c.chain(rv.task)
}

// TestDirectHandoffOwnerCrashesAfterAppend: the old owner's agent dies
// right after its release entry is appended, before its member record says
// so. The successor takes over from the changelog, its takeover lets the
// leader record the hand-off, and the task is not failed over when the old
// owner's record expires.
func TestDirectHandoffOwnerCrashesAfterAppend(t *testing.T) {
	c := directCluster(t)
	_, rv := c.revokedFromAFollower()
	appended, crashed := make(chan struct{}), make(chan struct{})
	agent.SetAfterReleaseAppend(c.members[rv.owner].a, func() {
		close(appended)
		<-crashed
	})
	released := make(chan error, 1)
	go func() {
		_, err := c.members[rv.owner].a.Release(context.Background(), rv.task, rv.epoch)
		released <- err
	}()
	<-appended
	c.crash(rv.owner)
	close(crashed)
	<-released // the dead agent's answer no worker hears
	poll.Eventually(t, 10*time.Second, "m3 serving "+rv.task, func() error {
		if e, ok := c.activeAt("m3", rv.task); !ok || e != rv.next {
			return fmt.Errorf("m3 shows %s active %v at epoch %d", rv.task, ok, e)
		}
		return nil
	})
	c.commits("m3", rv.task, "b", 1)
	poll.Eventually(t, 10*time.Second, "the hand-off recorded from m3's takeover", func() error {
		if owner, epoch := c.recorded(rv.task); owner != "m3" || epoch != rv.next {
			return fmt.Errorf("%s on %s at epoch %d", rv.task, owner, epoch)
		}
		return nil
	})
	// The old owner's record expires: its other tasks fail over, this one
	// stays where the changelog put it.
	poll.Eventually(t, c.cfg.SessionTimeout.D()+20*time.Second, rv.owner+"'s other tasks failed over", func() error {
		for _, gt := range c.view().Tasks {
			if gt.Active == rv.owner {
				return fmt.Errorf("%s still on %s", gt.ID, rv.owner)
			}
		}
		return nil
	})
	if owner, epoch := c.recorded(rv.task); owner != "m3" || epoch != rv.next {
		t.Errorf("after %s's record expired, %s is on %s at epoch %d, want m3 at %d", rv.owner, rv.task, owner, epoch, rv.next)
	}
	c.hasKeys("m3", rv.task, "a", 3)
	c.chain(rv.task)
}

// TestDirectHandoffHoldsTheSuccessorsCatchUps: from the revoke that hands
// a task to m3 (or, in eager mode, from m3's learner catching up) until m3
// has taken the task over and committed to it, m3's catch-ups yield to the
// hand-off: they are held, and the hold ends with m3's first commit.
func TestDirectHandoffHoldsTheSuccessorsCatchUps(t *testing.T) {
	defer agent.SetIncomingHold(time.Hour)() // the test's release comes when it likes
	c := directCluster(t)
	rv := c.revokedTo("m3", "m1", "m2")
	m3 := c.members["m3"].a
	poll.Eventually(t, 10*time.Second, "m3's catch-ups held for "+rv.task, func() error {
		if incoming, held := agent.Incoming(m3, rv.task); !incoming || !held {
			return fmt.Errorf("m3: %s incoming %v, catch-ups held %v", rv.task, incoming, held)
		}
		return nil
	})
	c.handOver(rv)
	c.commits("m3", rv.task, "b", 1)
	if incoming, _ := agent.Incoming(m3, rv.task); incoming {
		t.Errorf("m3 still holds its catch-ups for %s after its first commit", rv.task)
	}
}

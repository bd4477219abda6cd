package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/poll"
)

// The queries' cases, one test each as docs/ARCHITECTURE.md ("Queries:
// which copy may answer") names them.

// get queries key of task through member id within bound.
func (c *cluster) get(id, task, key string, b api.Bound, timeout time.Duration) (api.QueryAnswer, error) {
	return c.members[id].a.Query(context.Background(), api.Query{Kind: api.QueryGet, Task: task, Keys: [][]byte{[]byte(key)}, Bound: b, Timeout: timeout})
}

// mustGet is get that fails the test on an error or a value other than
// want ("" for absent), and returns the answer.
func (c *cluster) mustGet(id, task, key string, b api.Bound, want string) api.QueryAnswer {
	c.t.Helper()
	ans, err := c.get(id, task, key, b, 10*time.Second)
	if err != nil {
		c.t.Fatalf("query %s/%s through %s (%+v): %v", task, key, id, b, err)
	}
	got := ""
	if ans.Values[0] != nil {
		got = string(ans.Values[0])
	}
	if got != want || (want != "") != (ans.Values[0] != nil) {
		c.t.Fatalf("query %s/%s through %s (%+v) = %q from %s at seq %d, want %q", task, key, id, b, got, ans.Member, ans.Seq, want)
	}
	if ans.Routed != (ans.Member != id) {
		c.t.Errorf("query through %s answered by %s with routed=%v", id, ans.Member, ans.Routed)
	}
	return ans
}

// queryCluster starts m1 and m2 with four stateful tasks and a stateless
// one, standbys as given, and waits until every task is active.
func queryCluster(t *testing.T, standbys int) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("a group of agents")
	}
	cfg := testConfig("q0..3", "s0")
	cfg.Standbys = standbys
	c := newCluster(t, cfg)
	c.start("m1")
	c.start("m2")
	poll.Eventually(t, 20*time.Second, "m1 and m2 owning the tasks", func() error {
		c.releaseRevoked("m1")
		gv := c.view()
		if err := balanced(gv, "m1", "m2"); err != nil {
			return err
		}
		if err := c.activeEverywhere(gv); err != nil {
			return err
		}
		for _, gt := range gv.Tasks {
			if gt.Stateful && len(gt.Standbys) < standbys {
				return fmt.Errorf("%s has standbys %v", gt.ID, gt.Standbys)
			}
		}
		return nil
	})
	return c
}

// ownerOf returns the member the group shows task active on.
func (c *cluster) ownerOf(task string) string {
	for _, gt := range c.view().Tasks {
		if gt.ID == task {
			return gt.Active
		}
	}
	c.t.Fatalf("no task %s in the group", task)
	return ""
}

// TestQueryCurrentOwner: the default bound, through every member, gives
// the state after the last acknowledged commit, whether the member asked
// holds a copy or routes the query; min_seq and max_lag are met by the
// owner too. A stateless task's query is invalid, an unknown task's
// unknown.
func TestQueryCurrentOwner(t *testing.T) {
	c := queryCluster(t, 0)
	c.start("m3") // holds no copy of the tasks m1 and m2 keep
	for _, task := range []string{"q0", "q1", "q2", "q3"} {
		owner := c.ownerOf(task)
		last := c.commits(owner, task, "k", 3)
		for _, id := range []string{"m1", "m2", "m3"} {
			ans := c.mustGet(id, task, "k2", api.Bound{}, "v")
			if ans.Seq < last {
				t.Errorf("%s through %s: answer at seq %d, before the last acknowledged commit %d", task, id, ans.Seq, last)
			}
			c.mustGet(id, task, "nope", api.Bound{}, "")
			c.mustGet(id, task, "k0", api.Bound{MinSeq: last}, "v")
			c.mustGet(id, task, "k1", api.Bound{Lagged: true}, "v")
		}
	}
	if _, err := c.get("m1", "s0", "k", api.Bound{}, time.Second); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("query of stateless s0 = %v, want ErrInvalid", err)
	}
	if _, err := c.get("m1", "nope", "k", api.Bound{}, time.Second); !errors.Is(err, api.ErrUnknownTask) {
		t.Errorf("query of unknown task = %v, want ErrUnknownTask", err)
	}
}

// TestQueryNoCopyMeetsTheBound: a min_seq past the task's changelog is met
// by no copy: the query waits its timeout and fails unavailable.
func TestQueryNoCopyMeetsTheBound(t *testing.T) {
	c := queryCluster(t, 0)
	owner := c.ownerOf("q0")
	last := c.commits(owner, "q0", "k", 1)
	for _, id := range []string{"m1", "m2"} {
		ans, err := c.get(id, "q0", "k0", api.Bound{MinSeq: last + 1000}, 300*time.Millisecond)
		if !errors.Is(err, api.ErrUnavailable) {
			t.Errorf("min_seq past the changelog through %s = %+v, %v; want ErrUnavailable", id, ans, err)
		}
	}
}

// TestQueryStaleOwner: an owner that still believes it owns a task whose
// subject has moved on (a newer owner appended: here the test does) does
// not meet the default bound; the copy that has applied the newer entry
// does (the standby, tailing).
func TestQueryStaleOwner(t *testing.T) {
	c := queryCluster(t, 1)
	owner := c.ownerOf("q1")
	last := c.commits(owner, "q1", "k", 2)
	clog, err := changelog.Open(context.Background(), c.js, changelog.Options{Group: c.group})
	if err != nil {
		t.Fatal(err)
	}
	newer, err := clog.Append(context.Background(), "q1", last, changelog.Entry{Kind: changelog.KindCommit, Epoch: 1000,
		Puts: []changelog.KV{{Key: []byte("k0"), Value: []byte("newer")}}})
	if err != nil {
		t.Fatal(err)
	}
	ans := c.mustGet(owner, "q1", "k0", api.Bound{}, "newer")
	if ans.Member == owner || ans.Seq < newer {
		t.Errorf("the default bound through the stale owner %s: answered by %s at seq %d, want another copy at %d or later", owner, ans.Member, ans.Seq, newer)
	}
	// A copy at the owner's own last commit still meets a bound below it:
	// it is the changelog's state at that sequence.
	if ans := c.mustGet(owner, "q1", "k1", api.Bound{MinSeq: last}, "v"); ans.Seq < last {
		t.Errorf("min_seq %d answered at seq %d", last, ans.Seq)
	}
}

// TestQueryStandbyAfterOwnerCrash: once the owner is killed, its standby
// keeps serving max_lag and, since nothing can be acknowledged without an
// owner, the default bound too, before the failover has happened.
func TestQueryStandbyAfterOwnerCrash(t *testing.T) {
	c := queryCluster(t, 1)
	leader, err := c.leader()
	if err != nil {
		t.Fatal(err)
	}
	var task, owner string
	for _, gt := range c.view().Tasks {
		if gt.Stateful && gt.Active != leader {
			task, owner = gt.ID, gt.Active
		}
	}
	if task == "" {
		t.Fatalf("the leader %s owns every stateful task", leader)
	}
	last := c.commits(owner, task, "k", 2)
	standby := pickOther(owner, "m1", "m2")
	poll.Eventually(t, 10*time.Second, "the standby's copy current", func() error {
		// Answered by the standby itself: a routed answer from the owner
		// says nothing of the standby's copy.
		ans, err := c.get(standby, task, "k1", api.Bound{MinSeq: last}, 100*time.Millisecond)
		if err == nil && ans.Member != standby {
			err = fmt.Errorf("answered by %s", ans.Member)
		}
		return err
	})
	c.crash(owner)
	for _, b := range []api.Bound{{Lagged: true}, {}} {
		ans := c.mustGet(standby, task, "k1", b, "v")
		if ans.Member != standby || ans.Role != api.RoleStandby || ans.Seq != last {
			t.Errorf("after the owner's crash, %+v: answered by %s (%s) at seq %d, want the standby %s at %d", b, ans.Member, ans.Role, ans.Seq, standby, last)
		}
	}
}

func pickOther(not string, ids ...string) string {
	i := slices.IndexFunc(ids, func(id string) bool { return id != not })
	return ids[i]
}

// TestQueryThroughDirectHandoff holds a direct hand-off between its
// release entry and the old owner's record of it: the old owner's copy
// (its last commit) no longer meets the default bound, the successor's
// does once it has applied the entry, and every answer is the state of
// the changelog at its sequence.
func TestQueryThroughDirectHandoff(t *testing.T) {
	c := directCluster(t)
	rv := c.revokedTo("m3", "m1", "m2")
	last := c.commits(rv.owner, rv.task, "a", 3)
	if ans := c.mustGet(rv.owner, rv.task, "a2", api.Bound{}, "v"); ans.Member != rv.owner || ans.Seq != last {
		t.Errorf("before the release: answered by %s at seq %d, want the owner %s at %d", ans.Member, ans.Seq, rv.owner, last)
	}
	appended, held := make(chan struct{}), make(chan struct{})
	agent.SetAfterReleaseAppend(c.members[rv.owner].a, func() {
		close(appended)
		<-held
	})
	released := make(chan error, 1)
	go func() {
		_, err := c.members[rv.owner].a.Release(context.Background(), rv.task, rv.epoch)
		released <- err
	}()
	<-appended
	for _, id := range []string{rv.owner, "m3"} {
		ans := c.mustGet(id, rv.task, "a1", api.Bound{}, "v")
		if ans.Member != "m3" || ans.Seq <= last {
			t.Errorf("in the release window through %s: answered by %s at seq %d, want m3 past %d (the release entry)", id, ans.Member, ans.Seq, last)
		}
		if ans := c.mustGet(id, rv.task, "a0", api.Bound{MinSeq: last}, "v"); ans.Seq < last {
			t.Errorf("min_seq %d answered at %d", last, ans.Seq)
		}
	}
	close(held)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "m3 serving "+rv.task, func() error {
		if e, ok := c.activeAt("m3", rv.task); !ok || e != rv.next {
			return fmt.Errorf("m3 shows %s active %v at epoch %d", rv.task, ok, e)
		}
		return nil
	})
	next := c.commits("m3", rv.task, "b", 1)
	for _, id := range []string{rv.owner, "m3"} {
		ans := c.mustGet(id, rv.task, "b0", api.Bound{}, "v")
		if ans.Seq < next {
			t.Errorf("after the takeover through %s: seq %d, want %d or later", id, ans.Seq, next)
		}
	}
	ans := c.mustGet(rv.owner, rv.task, "a0", api.Bound{MinSeq: last}, "v")
	if ans.Member == rv.owner && ans.Role != api.RoleCopy {
		t.Errorf("the old owner's copy answered with role %q, want %q", ans.Role, api.RoleCopy)
	}
}

// TestQueryBatchAndScan: a batch get and a scan come from one copy at one
// sequence, as the worker's do.
func TestQueryBatchAndScan(t *testing.T) {
	c := queryCluster(t, 0)
	owner := c.ownerOf("q2")
	c.commits(owner, "q2", "k", 4)
	other := pickOther(owner, "m1", "m2")
	ans, err := c.members[other].a.Query(context.Background(), api.Query{Kind: api.QueryGetMany, Task: "q2",
		Keys: [][]byte{[]byte("k3"), []byte("zz"), []byte("k0")}})
	if err != nil || len(ans.Values) != 3 || string(ans.Values[0]) != "v" || ans.Values[1] != nil || string(ans.Values[2]) != "v" {
		t.Fatalf("batch get = %+v, %v; want [v nil v]", ans, err)
	}
	ans, err = c.members[other].a.Query(context.Background(), api.Query{Kind: api.QueryScan, Task: "q2", Scan: api.ScanOptions{Prefix: []byte("k"), Limit: 3}})
	if err != nil || len(ans.Items) != 3 || !bytes.Equal(ans.Items[0].Key, []byte("k0")) || !bytes.Equal(ans.Items[2].Key, []byte("k2")) {
		t.Fatalf("scan = %+v, %v; want k0..k2", ans, err)
	}
	_, err = c.members[other].a.Query(context.Background(), api.Query{Kind: api.QueryGetMany, Task: "q2", MaxBytes: 1,
		Keys: [][]byte{[]byte("k3"), []byte("k0")}})
	if !errors.Is(err, api.ErrTooLarge) {
		t.Errorf("a routed batch get over its bytes = %v, want ErrTooLarge", err)
	}
}

package group

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/internal/natstest"
	"github.com/handoffhq/handoff/internal/poll"
)

// claimEnv is a group bucket on a real JetStream server.
type claimEnv struct {
	t  *testing.T
	js jetstream.JetStream
	kv jetstream.KeyValue
}

func newClaimEnv(t *testing.T) *claimEnv {
	t.Helper()
	js := natstest.Start(t).JetStream(t)
	kv, err := OpenBucket(context.Background(), js, "g", 1)
	if err != nil {
		t.Fatal(err)
	}
	return &claimEnv{t: t, js: js, kv: kv}
}

// claim claims m1 for owner and incarnation, bounded by 30 seconds.
func (e *claimEnv) claim(owner, inc string, ttl time.Duration, o ClaimOptions) (*MemberClaim, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return ClaimMember(ctx, e.js, e.kv, "g", MemberRecord{ID: "m1", Owner: owner, Incarnation: inc, Host: "host-" + owner}, ttl, o)
}

// heartbeat refreshes c every ttl/3 until the test ends, as an agent does.
func (e *claimEnv) heartbeat(c *MemberClaim, rec MemberRecord) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(c.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := c.Refresh(ctx, rec); err != nil && ctx.Err() == nil {
				e.t.Errorf("heartbeat of %s: %v", rec.Incarnation, err)
				return
			}
		}
	}()
	e.t.Cleanup(func() { cancel(); wg.Wait() })
}

// holder returns the stored record of m1.
func (e *claimEnv) holder() (MemberRecord, bool) {
	e.t.Helper()
	en, err := e.kv.Get(context.Background(), PrefixMember+"m1")
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return MemberRecord{}, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var r MemberRecord
	if err := json.Unmarshal(en.Value(), &r); err != nil {
		e.t.Fatal(err)
	}
	return r, true
}

func wantTaken(t *testing.T, err error, holderInc string, lost bool) {
	t.Helper()
	var taken *MemberTakenError
	if !errors.As(err, &taken) {
		t.Fatalf("claim = %v, want a *MemberTakenError", err)
	}
	if taken.Holder.Incarnation != holderInc || taken.Lost != lost {
		t.Errorf("MemberTakenError names holder %q (lost %v), want %q (lost %v)", taken.Holder.Incarnation, taken.Lost, holderInc, lost)
	}
	msg := err.Error()
	for _, want := range []string{`member ID "m1"`, "incarnation " + holderInc, "host-", "--member-id"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}

// TestClaimRefusesLiveHolder: while an agent of another data dir keeps its
// record alive, a claim of its member ID fails naming it, after saying it
// waits, and writes nothing.
func TestClaimRefusesLiveHolder(t *testing.T) {
	e := newClaimEnv(t)
	const ttl = 2 * time.Second
	a, err := e.claim("dir-a", "inc-a", ttl, ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.heartbeat(a, MemberRecord{ID: "m1", Owner: "dir-a", Incarnation: "inc-a", Host: "host-dir-a"})
	var waited []string
	_, err = e.claim("dir-b", "inc-b", ttl, ClaimOptions{Waiting: func(h MemberRecord) { waited = append(waited, h.Incarnation) }})
	wantTaken(t, err, "inc-a", false)
	if len(waited) != 1 || waited[0] != "inc-a" {
		t.Errorf("Waiting called with %v, want once with inc-a", waited)
	}
	if r, _ := e.holder(); r.Incarnation != "inc-a" {
		t.Errorf("record after the refused claim is %+v, want inc-a's", r)
	}
}

// TestClaimSameOwnerTakesOver: an agent restarted on the same data dir
// takes its record over at once, although the old one lives on; the old
// incarnation, if it still ran somewhere (a copied data dir), loses it at
// its next heartbeat.
func TestClaimSameOwnerTakesOver(t *testing.T) {
	e := newClaimEnv(t)
	const ttl = time.Minute // outlives the test: the take-over must not wait for it
	old, err := e.claim("dir-a", "inc-1", ttl, ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waited := false
	if _, err := e.claim("dir-a", "inc-2", ttl, ClaimOptions{Waiting: func(MemberRecord) { waited = true }}); err != nil {
		t.Fatalf("claim of the same data dir: %v", err)
	}
	if waited {
		t.Error("the claim of the same data dir waited for the old record")
	}
	if r, _ := e.holder(); r.Incarnation != "inc-2" {
		t.Errorf("record is %+v, want inc-2's", r)
	}
	err = old.Refresh(context.Background(), MemberRecord{ID: "m1", Owner: "dir-a", Incarnation: "inc-1"})
	wantTaken(t, err, "inc-2", true)
}

// TestClaimAfterExpiry: the record of an agent that died expires, and an
// agent of another data dir (a lost volume) then gets the ID; the dead
// agent, were it only frozen, finds it taken when it heartbeats again.
func TestClaimAfterExpiry(t *testing.T) {
	e := newClaimEnv(t)
	const ttl = time.Second
	dead, err := e.claim("dir-a", "inc-a", ttl, ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waited := false
	if _, err := e.claim("dir-b", "inc-b", ttl, ClaimOptions{Waiting: func(MemberRecord) { waited = true }}); err != nil {
		t.Fatalf("claim after the holder died: %v", err)
	}
	if !waited {
		t.Error("the claim did not wait for the dead holder's record")
	}
	if r, _ := e.holder(); r.Incarnation != "inc-b" {
		t.Errorf("record is %+v, want inc-b's", r)
	}
	err = dead.Refresh(context.Background(), MemberRecord{ID: "m1", Owner: "dir-a", Incarnation: "inc-a"})
	wantTaken(t, err, "inc-b", true)
	if !strings.Contains(err.Error(), "taken over") {
		t.Errorf("error %q does not say the ID was taken over", err)
	}
}

// TestClaimRefreshRecovers: a heartbeat finds the record moved on without
// anyone else holding it — expired while the agent was frozen, or moved by
// its own write whose acknowledgement was lost — and goes on holding it.
func TestClaimRefreshRecovers(t *testing.T) {
	e := newClaimEnv(t)
	const ttl = time.Second
	rec := MemberRecord{ID: "m1", Owner: "dir-a", Incarnation: "inc-a"}
	c, err := e.claim("dir-a", "inc-a", ttl, ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 30*time.Second, "the record to expire", func() error {
		if _, alive := e.holder(); alive {
			return errors.New("it is still there")
		}
		return nil
	})
	if err := c.Refresh(context.Background(), rec); err != nil {
		t.Fatalf("Refresh after the record expired: %v", err)
	}
	if _, alive := e.holder(); !alive {
		t.Fatal("Refresh after expiry did not write the record back")
	}
	// A write of ours the claim did not see acknowledged.
	b, _ := json.Marshal(rec)
	if _, err := e.js.Publish(context.Background(), keySubject("g", PrefixMember+"m1"), b, jetstream.WithMsgTTL(ttl)); err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(context.Background(), rec); err != nil {
		t.Fatalf("Refresh after a lost acknowledgement: %v", err)
	}
	if err := c.Refresh(context.Background(), rec); err != nil {
		t.Fatalf("Refresh after that: %v", err)
	}
}

// TestClaimRace: two agents of different data dirs claim one new ID at
// once; exactly one gets it, the other is refused naming it.
func TestClaimRace(t *testing.T) {
	e := newClaimEnv(t)
	const ttl = 2 * time.Second
	type result struct {
		inc string
		c   *MemberClaim
		err error
	}
	results := make(chan result, 2)
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := e.claim("dir-"+id, "inc-"+id, ttl, ClaimOptions{})
			if err == nil {
				e.heartbeat(c, MemberRecord{ID: "m1", Owner: "dir-" + id, Incarnation: "inc-" + id, Host: "host-dir-" + id})
			}
			results <- result{"inc-" + id, c, err}
		}()
	}
	wg.Wait()
	close(results)
	var won, lost []result
	for r := range results {
		if r.err == nil {
			won = append(won, r)
		} else {
			lost = append(lost, r)
		}
	}
	if len(won) != 1 || len(lost) != 1 {
		t.Fatalf("%d claims won and %d lost, want one each: %+v %+v", len(won), len(lost), won, lost)
	}
	wantTaken(t, lost[0].err, won[0].inc, false)
}

// TestClaimRelease: a released record frees the ID at once; a claim that
// lost its record does not delete its successor's.
func TestClaimRelease(t *testing.T) {
	e := newClaimEnv(t)
	const ttl = time.Minute
	a, err := e.claim("dir-a", "inc-a", ttl, ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, alive := e.holder(); alive {
		t.Fatal("record alive after Release")
	}
	if _, err := e.claim("dir-b", "inc-b", ttl, ClaimOptions{Waiting: func(MemberRecord) { t.Error("claim after a release waited") }}); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, alive := e.holder(); !alive || r.Incarnation != "inc-b" {
		t.Errorf("after a stale Release the record is %+v (alive %v), want inc-b's", r, alive)
	}
}

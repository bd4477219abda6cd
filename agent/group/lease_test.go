package group

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/internal/natstest"
)

// TestLeaseFencesWrites: a lease fences the leader's writes; once another
// member holds the lease, the old holder's writes and renewals are refused
// with ErrLeaseLost and nothing of them is stored.
func TestLeaseFencesWrites(t *testing.T) {
	ctx := context.Background()
	js, kv, l := leaseOfA(t)
	if _, err := Campaign(ctx, js, kv, "g", LeaseRecord{Member: "b"}, time.Minute); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("second Campaign = %v, want jetstream.ErrKeyExists", err)
	}
	if _, err := l.Put(ctx, KeyGeneration, []byte(`{"generation":1}`)); err != nil {
		t.Fatalf("Put while leading: %v", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("Renew while leading: %v", err)
	}
	// b takes the lease over.
	if err := kv.Delete(ctx, KeyLease); err != nil {
		t.Fatal(err)
	}
	if _, err := Campaign(ctx, js, kv, "g", LeaseRecord{Member: "b"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Put(ctx, KeyGeneration, []byte(`{"generation":2}`)); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Put after the lease was taken over = %v, want ErrLeaseLost", err)
	}
	if err := l.Renew(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Renew after the lease was taken over = %v, want ErrLeaseLost", err)
	}
	g, _, err := ReadGeneration(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if g.Generation != 1 {
		t.Errorf("stored generation %d, want 1: a deposed leader's write landed", g.Generation)
	}
	if leader, err := ReadLeader(ctx, kv); err != nil || leader != "b" {
		t.Errorf("ReadLeader = %q, %v; want b", leader, err)
	}
}

// TestLeasePutAllFences: PutAll writes every key, each fenced on the lease,
// and returns their revisions in order; once another member holds the
// lease, a PutAll of the old holder is refused with ErrLeaseLost and stores
// none of its keys.
func TestLeasePutAllFences(t *testing.T) {
	ctx := context.Background()
	js, kv, l := leaseOfA(t)
	keys := []string{PrefixAssignment + "a", PrefixAssignment + "b", PrefixAssignment + "c"}
	values := [][]byte{[]byte(`"1a"`), []byte(`"1b"`), []byte(`"1c"`)}
	revs, err := l.PutAll(ctx, keys, values)
	if err != nil {
		t.Fatalf("PutAll while leading: %v", err)
	}
	for i, key := range keys {
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get %s: %v", key, err)
		}
		if e.Revision() != revs[i] || string(e.Value()) != string(values[i]) {
			t.Errorf("%s = %s at revision %d, PutAll said revision %d for %s", key, e.Value(), e.Revision(), revs[i], values[i])
		}
	}
	if err := kv.Delete(ctx, KeyLease); err != nil {
		t.Fatal(err)
	}
	if _, err := Campaign(ctx, js, kv, "g", LeaseRecord{Member: "b"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := l.PutAll(ctx, keys, [][]byte{[]byte(`"2a"`), []byte(`"2b"`), []byte(`"2c"`)}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("PutAll after the lease was taken over = %v, want ErrLeaseLost", err)
	}
	for i, key := range keys {
		if e, err := kv.Get(ctx, key); err != nil || string(e.Value()) != string(values[i]) {
			t.Errorf("%s after a deposed PutAll: %v, %v; want %s still", key, e, err, values[i])
		}
	}
}

// leaseOfA opens group g's bucket on a fresh server and campaigns for its
// lease as member a.
func leaseOfA(t *testing.T) (jetstream.JetStream, jetstream.KeyValue, *Lease) {
	t.Helper()
	ctx := context.Background()
	js := natstest.Start(t).JetStream(t)
	kv, err := OpenBucket(ctx, js, "g", 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Campaign(ctx, js, kv, "g", LeaseRecord{Member: "a"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return js, kv, l
}

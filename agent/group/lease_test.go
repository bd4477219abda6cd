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
	js := natstest.Start(t).JetStream(t)
	kv, err := OpenBucket(ctx, js, "g", 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Campaign(ctx, js, kv, "g", LeaseRecord{Member: "a"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
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

package group

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/internal/natstest"
)

// lead starts a server, opens group g's bucket there and wins its lease as
// member a.
func lead(t testing.TB) (jetstream.JetStream, jetstream.KeyValue, *Lease) {
	t.Helper()
	ctx := context.Background()
	js := natstest.Start(t).JetStream(t)
	kv, err := OpenBucket(ctx, js, "g", 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Campaign(ctx, js, kv, "g", LeaseRecord{Member: "a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return js, kv, l
}

// entries returns n entries under prefix, each value naming its key and tag.
func entries(prefix, tag string, n int) []Entry {
	out := make([]Entry, n)
	for i := range out {
		k := fmt.Sprintf("%s%04d", prefix, i)
		out[i] = Entry{Key: k, Value: []byte(k + "=" + tag)}
	}
	return out
}

// checkStored fails unless each entry is stored at its revision.
func checkStored(t *testing.T, kv jetstream.KeyValue, es []Entry, revs []uint64) {
	t.Helper()
	if len(revs) != len(es) {
		t.Fatalf("%d revisions for %d entries", len(revs), len(es))
	}
	for i, e := range es {
		got, err := kv.GetRevision(context.Background(), e.Key, revs[i])
		if err != nil {
			t.Fatalf("%s at revision %d: %v", e.Key, revs[i], err)
		}
		if string(got.Value()) != string(e.Value) {
			t.Fatalf("%s at revision %d = %q, want %q", e.Key, revs[i], got.Value(), e.Value)
		}
	}
}

// TestLeaseFencesBatches: a leader's batches are stored whole at the
// revisions PutBatch returns, cut into batches of MaxBatch; once another
// member holds the lease, a batch of the old holder is refused with
// ErrLeaseLost and nothing of it is stored.
func TestLeaseFencesBatches(t *testing.T) {
	ctx := context.Background()
	js, kv, l := lead(t)
	first := entries("assign.m", "1", MaxBatch+3) // two batches
	revs, err := l.PutBatch(ctx, first)
	if err != nil {
		t.Fatalf("PutBatch while leading: %v", err)
	}
	checkStored(t, kv, first, revs)

	if err := kv.Delete(ctx, KeyLease); err != nil {
		t.Fatal(err)
	}
	if _, err := Campaign(ctx, js, kv, "g", LeaseRecord{Member: "b"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	stale := entries("assign.m", "2", 5)
	if revs, err := l.PutBatch(ctx, stale); !errors.Is(err, ErrLeaseLost) || len(revs) != 0 {
		t.Fatalf("PutBatch after the lease was taken over = %v, %v; want no revision and ErrLeaseLost", revs, err)
	}
	for _, e := range first[:len(stale)] {
		got, err := kv.Get(ctx, e.Key)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Value()) != string(e.Value) {
			t.Errorf("%s = %q after a deposed leader's batch, want %q", e.Key, got.Value(), e.Value)
		}
	}
}

// TestUnfinishedBatchStoresNothing: a leader that stops halfway through a
// batch (its commit never sent) leaves nothing of it, and its successor's
// batches are stored.
func TestUnfinishedBatchStoresNothing(t *testing.T) {
	ctx := context.Background()
	js, kv, l := lead(t)
	half := entries("assign.m", "unfinished", 4)
	if _, err := publishBatch(ctx, js.Conn(), "g", half, l.Revision(), false); err != nil {
		t.Fatal(err)
	}
	next := entries("assign.n", "next", 3)
	revs, err := l.PutBatch(ctx, next)
	if err != nil {
		t.Fatalf("PutBatch after an unfinished batch: %v", err)
	}
	checkStored(t, kv, next, revs)
	for _, e := range half {
		if got, err := kv.Get(ctx, e.Key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s of the unfinished batch: %v, %v; want not found", e.Key, got, err)
		}
	}
}

// TestPublishWhenBatchesAreRefused: on a bucket whose stream does not allow
// atomic batches (an agent of an earlier version updated it), a generation
// is still published whole, its assignments written one by one, and the
// publication says why.
func TestPublishWhenBatchesAreRefused(t *testing.T) {
	ctx := context.Background()
	js := natstest.Start(t).JetStream(t)
	for _, allow := range []bool{true, false} {
		t.Run(fmt.Sprintf("allow=%v", allow), func(t *testing.T) {
			name := fmt.Sprintf("g%v", allow)
			kv, err := OpenBucket(ctx, js, name, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !allow {
				st, err := js.Stream(ctx, "KV_"+BucketName(name))
				if err != nil {
					t.Fatal(err)
				}
				cfg := st.CachedInfo().Config
				cfg.AllowAtomicPublish = false
				if _, err := js.UpdateStream(ctx, cfg); err != nil {
					t.Fatal(err)
				}
			}
			l, err := Campaign(ctx, js, kv, name, LeaseRecord{Member: "m0"}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			cfg := assign.DefaultConfig()
			cfg.Stateful = []string{"t-0..39"}
			in := assign.Input{Config: cfg, Now: time.Unix(0, 0).UTC(), Current: assign.Assignment{Tasks: map[string]*assign.TaskAssignment{}}}
			var live []string
			for i := range 8 {
				id := fmt.Sprintf("m%d", i)
				in.Members = append(in.Members, assign.Member{ID: id})
				live = append(live, id)
			}
			res := assign.Plan(in)
			p, _, err := LoadPublisher(ctx, kv, "m0")
			if err != nil {
				t.Fatal(err)
			}
			g, st, err := p.Publish(ctx, l, res, live, true)
			if err != nil {
				t.Fatal(err)
			}
			if want := len(live) + 2; st.Writes != want {
				t.Errorf("%d writes, want %d", st.Writes, want)
			}
			switch {
			case allow && (st.Batches != 1 || st.Refused != nil):
				t.Errorf("batches %d, refused %v; want one batch", st.Batches, st.Refused)
			case !allow && (st.Batches != 0 || !errors.Is(st.Refused, ErrBatchRefused)):
				t.Errorf("batches %d, refused %v; want none, refused", st.Batches, st.Refused)
			}
			rg, _, as, err := ReadAssignment(ctx, kv)
			if err != nil {
				t.Fatal(err)
			}
			if rg.Generation != g.Generation || !as.Equal(res.Assignment) {
				t.Errorf("read back generation %d, equal %v; want generation %d as published", rg.Generation, as.Equal(res.Assignment), g.Generation)
			}
		})
	}
}

// BenchmarkPutBatch compares writing n fenced keys in atomic batches with
// writing them one by one, on a single-node file-backed bucket (in
// process): what a generation with n changed assignments costs.
func BenchmarkPutBatch(b *testing.B) {
	ctx := context.Background()
	_, _, l := lead(b)
	value := make([]byte, 600) // a member's assignment of about ten tasks
	for _, n := range []int{2, 4, 8, 32, 128, 500} {
		es := make([]Entry, n)
		for i := range es {
			es[i] = Entry{Key: fmt.Sprintf("assign.m%04d", i), Value: value}
		}
		b.Run(fmt.Sprintf("batch/%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := l.PutBatch(ctx, es); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("one-by-one/%d", n), func(b *testing.B) {
			for b.Loop() {
				for _, e := range es {
					if _, err := l.Put(ctx, e.Key, e.Value); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

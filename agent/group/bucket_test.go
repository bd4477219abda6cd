package group

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/internal/natstest"
)

// TestBucketHoldsManyConsumers: the group's bucket takes more consumers
// than nats-server's default bound of 1,000 per stream (every member
// watches it), on a server with its default limits, as a deployment's is;
// and a member that opens the bucket again (creating or updating it,
// which drops the bound) leaves it bound.
func TestBucketHoldsManyConsumers(t *testing.T) {
	js := natstest.StartDeployed(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		if _, err := OpenBucket(ctx, js, "g", 1); err != nil {
			t.Fatal(err)
		}
	}
	natstest.CreateConsumers(ctx, t, js, "KV_"+BucketName("g"), "$KV."+BucketName("g")+"."+KeyGeneration, 1_001)
}

// TestOpenBucketUpdatesOnlyWhatDiffers: a member that opens a bucket that
// has its settings does not update its stream (every member opens it when
// it starts); one whose stream lost a setting (an agent of an earlier
// version updated it) sets it again.
func TestOpenBucketUpdatesOnlyWhatDiffers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := natstest.Start(t).JetStream(t)
	config := func() jetstream.StreamConfig {
		t.Helper()
		st, err := js.Stream(ctx, "KV_"+BucketName("g"))
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config
	}
	update := func(edit func(*jetstream.StreamConfig)) {
		t.Helper()
		cfg := config()
		edit(&cfg)
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := OpenBucket(ctx, js, "g", 1); err != nil {
		t.Fatal(err)
	}
	// A description only an update of the bucket would reset.
	update(func(c *jetstream.StreamConfig) { c.Description = "marked" })
	if _, err := OpenBucket(ctx, js, "g", 1); err != nil {
		t.Fatal(err)
	}
	if got := config().Description; got != "marked" {
		t.Errorf("description %q after opening a bucket as set: the open updated its stream", got)
	}
	update(func(c *jetstream.StreamConfig) { c.AllowAtomicPublish = false })
	if _, err := OpenBucket(ctx, js, "g", 1); err != nil {
		t.Fatal(err)
	}
	if cfg := config(); !cfg.AllowAtomicPublish || cfg.MaxConsumers != maxConsumers {
		t.Errorf("after opening a bucket that lost a setting: atomic batches %v, consumers %d; want true, %d", cfg.AllowAtomicPublish, cfg.MaxConsumers, maxConsumers)
	}
}

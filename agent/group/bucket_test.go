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
	const consumers = 1_001
	for i := range consumers {
		_, err := js.CreateConsumer(ctx, "KV_"+BucketName("g"), jetstream.ConsumerConfig{
			FilterSubject: "$KV." + BucketName("g") + "." + KeyGeneration, InactiveThreshold: time.Minute,
		})
		if err != nil {
			t.Fatalf("consumer %d of %d: %v", i+1, consumers, err)
		}
	}
}

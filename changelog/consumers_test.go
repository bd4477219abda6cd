package changelog

import (
	"context"
	"testing"
	"time"

	"github.com/handoffhq/handoff/internal/natstest"
)

// TestChangelogHoldsManyConsumers: the changelog stream takes more
// consumers than nats-server's default bound of 1,000 per stream (every
// learner's and standby's tailer holds one), on a server with its default
// limits, as a deployment's is.
func TestChangelogHoldsManyConsumers(t *testing.T) {
	js := natstest.StartDeployed(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log, err := Open(ctx, js, Options{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	natstest.CreateConsumers(ctx, t, js, log.Stream().CachedInfo().Config.Name, Subject("g", "t"), 1_001)
}

package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/handoffhq/handoff/internal/natstest"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/watchbuf"
)

// The producer rides out a NATS restart: while the server is down its
// publishes fail, it logs that it retries, and once the server is back it
// publishes again, on its own, until interrupted.
func TestProduceAcrossANATSRestart(t *testing.T) {
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	published := func() uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, inputStream("g"))
		if err != nil {
			return 0
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0
		}
		return info.State.Msgs
	}
	waitPublished := func(what string, n uint64) {
		poll.Eventually(t, 30*time.Second, what, func() error {
			if got := published(); got < n {
				return fmt.Errorf("%d of %d messages in the input", got, n)
			}
			return nil
		})
	}

	retrying := make(chan struct{})
	logs := &watchbuf.Buffer{OnWrite: func(s string) {
		if strings.Contains(s, "trying again in") {
			select {
			case <-retrying:
			default:
				close(retrying)
			}
		}
	}}
	var out watchbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--nats", srv.URL, "--group", "g", "--tasks", "p-0..1", "--rate", "100"}, &out, logs)
	}()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	waitPublished("the producer to publish", 10)

	srv.Shutdown()
	select {
	case <-retrying:
	case err := <-done:
		stopped = true
		t.Fatalf("the producer stopped when NATS went down: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the producer logged no retry within 30s of NATS going down:\n%s", logs.String())
	}
	srv.Resume(t)
	before := published()
	waitPublished("the producer to publish again once NATS is back", before+10)
	poll.Eventually(t, 30*time.Second, "the producer to log that it publishes again", func() error {
		if !strings.Contains(logs.String(), "publishing again") {
			return fmt.Errorf("logs: %q", logs.String())
		}
		return nil
	})
	cancel()
	stopped = true
	if err := <-done; err != nil {
		t.Errorf("the producer, interrupted after the restart: %v", err)
	}
}

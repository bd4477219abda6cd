package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
)

// pausedAgent accepts connections and never answers, as a stopped agent
// process does (the kernel completes the handshake).
func pausedAgent(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

func TestCallsGiveUpOnAPausedAgent(t *testing.T) {
	c := New(pausedAgent(t), WithCallTimeout(50*time.Millisecond))
	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"long-poll", func(ctx context.Context) error {
			_, err := c.Assignment(ctx, 3, 100*time.Millisecond)
			return err
		}},
		{"commit", func(ctx context.Context) error {
			_, err := c.Commit(ctx, "t1", api.CommitRequest{Epoch: 1})
			return err
		}},
		{"release", func(ctx context.Context) error {
			_, err := c.Release(ctx, "t1", 1)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The test's own bound, far above the call timeout: without the
			// call timeout the call would last until this one.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := tt.call(ctx)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s to a paused agent = %v, want a deadline exceeded", tt.name, err)
			}
			if ctx.Err() != nil {
				t.Fatalf("%s lasted until the test's own deadline", tt.name)
			}
		})
	}
}

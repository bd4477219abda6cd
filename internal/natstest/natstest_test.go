package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/internal/natstest"
)

func TestRestartKeepsURLAndData(t *testing.T) {
	s := natstest.Start(t)
	js := s.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s", []byte("x")); err != nil {
		t.Fatal(err)
	}
	url := s.URL
	s.Restart(t)
	if s.URL != url {
		t.Fatalf("URL after Restart = %q, want %q", s.URL, url)
	}
	// A fresh connection sees the data.
	st, err := s.JetStream(t).Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("%d messages after Restart, want 1", n)
	}
}

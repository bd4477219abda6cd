package countworker

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
	"github.com/handoffhq/handoff/internal/poll"
)

// TestCounterStartsOnPreparedInput: while a task is a learner, the worker
// makes its input's consumer; when the task becomes active it counts from
// its checkpoint on that consumer, making none, and commits at once
// although its batching delay is an hour. A preparation that started
// after input the checkpoint does not cover is not used: the worker reads
// anew, and counts every message once.
func TestCounterStartsOnPreparedInput(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS server")
	}
	for _, tc := range []struct {
		name string
		// before and after are the messages published before the task
		// appears as a learner and after; the previous owner committed
		// the first two.
		before, after int
		prepared      bool // the task starts on the prepared consumer
	}{
		{name: "prepared before the input", before: 2, after: 3, prepared: true},
		{name: "prepared after input the checkpoint lacks", before: 5, after: 0, prepared: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			js := startInput(t)
			stream, err := js.Stream(ctx, StreamName("g"))
			if err != nil {
				t.Fatal(err)
			}
			publish := func(n int) {
				for range n {
					if _, err := js.Publish(ctx, "input.g.t1", []byte("k")); err != nil {
						t.Fatal(err)
					}
				}
			}
			consumers := func() []string {
				var names []string
				l := stream.ConsumerNames(ctx)
				for n := range l.Name() {
					names = append(names, n)
				}
				slices.Sort(names)
				return names
			}
			publish(tc.before)

			agent := httpapitest.New()
			agent.Set("t1", httpapitest.Task{Role: api.RoleLearner, Epoch: 1})
			srv := httptest.NewServer(httpapi.New(agent, httpapi.Options{}).Handler())
			defer srv.Close()
			runCtx, cancel := context.WithCancel(ctx)
			ran := make(chan error, 1)
			go func() {
				ran <- Run(runCtx, Options{Client: client.New(srv.URL), JS: js, Group: "g", MaxDelay: time.Hour, Logger: zerolog.Nop()})
			}()
			defer func() {
				cancel()
				if err := <-ran; err != nil {
					t.Errorf("Run = %v", err)
				}
			}()

			var prepared []string
			poll.Eventually(t, 10*time.Second, "the learner's input consumer", func() error {
				if prepared = consumers(); len(prepared) != 1 {
					return fmt.Errorf("consumers %v, want one", prepared)
				}
				return nil
			})
			publish(tc.after)
			// The previous owner counted the first two messages.
			agent.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 2, Checkpoint: string(EncodeCheckpoint(2)), Data: map[string]string{"k": "2"}})
			waitFor(t, agent, "the first commit", func() bool { return checkpointOf(agent, "t1") > 2 })
			cp := checkpointOf(agent, "t1")
			if v, _ := agent.Value("t1", "k"); v != fmt.Sprint(cp) {
				t.Errorf("count of k = %q at checkpoint %d, want %d: each message once", v, cp, cp)
			}
			now := consumers()
			if same := slices.Equal(now, prepared); same != tc.prepared {
				t.Errorf("consumers %v after the start, %v while learning: same = %v, want %v", now, prepared, same, tc.prepared)
			}
		})
	}
}

package record

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/countworker"
	"github.com/handoffhq/handoff/internal/natstest"
)

// inputCounts reads task's input stream: each key's count, and the last
// sequence.
func inputCounts(t *testing.T, js jetstream.JetStream, group, task string) (map[string]uint64, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, countworker.StreamName(group))
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, countworker.InputSubject(group, task))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{countworker.InputSubject(group, task)}})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		md, _ := m.Metadata()
		counts[string(m.Data())]++
		if md.Sequence.Stream >= last.Sequence {
			return counts, last.Sequence
		}
	}
}

// TestGeneratorRemembersWhatWasStored publishes, restarts the server while
// publishing, and checks that what the generator remembers is exactly what
// the input stream holds: each message stored once, counted once.
func TestGeneratorRemembersWhatWasStored(t *testing.T) {
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	const group = "g"
	ctx := context.Background()
	if err := countworker.EnsureStream(ctx, js, countworker.StreamName(group), group); err != nil {
		t.Fatal(err)
	}
	tasks := []string{"a", "b", "c"}
	g := NewGenerator(js, GeneratorOptions{Group: group, Tasks: tasks, Keys: 5, Seed: 7})
	before := time.Now()
	if err := g.Publish(ctx, 30); err != nil {
		t.Fatal(err)
	}
	g.Start(500)
	srv.Restart(t)
	if err := g.Publish(ctx, 30); err != nil { // while the rate's goroutine publishes too
		t.Fatal(err)
	}
	if err := g.Stop(); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	sent, retries := g.Sent()
	t.Logf("%d messages acknowledged, %d retries", sent, retries)
	ends := g.Ends()
	total := 0
	for _, task := range tasks {
		counts, last := inputCounts(t, js, group, task)
		if ends[task] != last {
			t.Errorf("Ends()[%s] = %d, the stream's last is %d", task, ends[task], last)
		}
		want, n := g.Expected(task, last)
		if diffs := CompareCounts(stringCounts(counts), want); len(diffs) > 0 {
			t.Errorf("%s: the generator's counts differ from the stream's: %v", task, diffs)
		}
		inputs := g.Inputs(task)
		if uint64(len(inputs)) != n {
			t.Errorf("%s: %d inputs, %d expected messages", task, len(inputs), n)
		}
		for _, in := range inputs {
			if in.Published.Before(before) || in.Published.After(time.Now()) || in.Seq == 0 || in.Seq > last {
				t.Errorf("%s: input %+v published outside the test or beyond the stream", task, in)
				break
			}
		}
		total += len(inputs)
	}
	if total != sent || sent < 60 {
		t.Errorf("%d inputs over the tasks, Sent() = %d; want them equal and at least the 60 published by hand", total, sent)
	}
}

func stringCounts(c map[string]uint64) map[string][]byte {
	out := make(map[string][]byte, len(c))
	for k, v := range c {
		out[k] = strconv.AppendUint(nil, v, 10)
	}
	return out
}

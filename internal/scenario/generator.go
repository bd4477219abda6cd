package scenario

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Generator publishes continuous input to input.<group>.<task>: each
// message's body is a key from a small key space. It counts, exactly, what
// JetStream acknowledged: every message carries a unique Nats-Msg-Id and is
// retried with the same ID until acknowledged, so a publish whose
// acknowledgement was lost (a NATS restart) is stored once and counted once.
type Generator struct {
	js    jetstream.JetStream
	group string
	tasks []string
	keys  int
	rate  int // messages per second over all tasks

	cancel context.CancelFunc // stops publishing new messages
	// inflight ends the retries of messages in flight (abort).
	inflight       context.Context
	cancelInflight context.CancelFunc
	wg             sync.WaitGroup

	mu      sync.Mutex
	counts  map[string]map[string]uint64 // task → key → acknowledged messages
	last    map[string]uint64            // task → stream sequence of its last acknowledged message
	sent    int
	retries int
	err     error
}

func newGenerator(js jetstream.JetStream, group string, tasks []string, keys, rate int) *Generator {
	g := &Generator{js: js, group: group, tasks: tasks, keys: keys, rate: rate,
		counts: map[string]map[string]uint64{}, last: map[string]uint64{}}
	for _, t := range tasks {
		g.counts[t] = map[string]uint64{}
	}
	return g
}

// Start starts one publishing goroutine per task, each at rate/len(tasks)
// messages a second, paced by a ticker.
func (g *Generator) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.inflight, g.cancelInflight = context.WithCancel(context.Background())
	perTask := max(1, g.rate/len(g.tasks))
	for i, task := range g.tasks {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.run(ctx, task, i, perTask)
		}()
	}
}

// Stop stops publishing and waits until every message in flight has been
// acknowledged; its error says if one could not be.
func (g *Generator) Stop() error {
	if g.cancel == nil {
		return nil
	}
	g.cancel()
	g.wg.Wait()
	g.cancel = nil
	g.cancelInflight()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// abort stops publishing without waiting for the messages in flight; the
// counts are then uncertain. For cleanups.
func (g *Generator) abort() {
	if g.cancel == nil {
		return
	}
	g.cancelInflight()
	_ = g.Stop()
}

// run publishes task's input: ticks every 10ms, publishing what the rate
// allows since the last tick (ticks missed while a publish was retried are
// dropped, so the rate falls rather than bursts).
func (g *Generator) run(ctx context.Context, task string, salt, perSecond int) {
	const every = 10 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	subject := "input." + g.group + "." + task
	owed := 0.0
	n := uint64(salt) * 7919 // spreads the keys differently per task
	for seq := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		owed += float64(perSecond) * every.Seconds()
		for ; owed >= 1; owed-- {
			n = n*6364136223846793005 + 1442695040888963407
			key := "k" + strconv.Itoa(int(n>>33)%g.keys)
			id := task + "-" + strconv.Itoa(seq)
			seq++
			if err := g.publish(subject, task, key, id); err != nil {
				g.mu.Lock()
				if g.err == nil {
					g.err = err
				}
				g.mu.Unlock()
				return
			}
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// publish sends one message and retries it, with the same message ID,
// until JetStream acknowledges it (a duplicate's acknowledgement names the
// original's sequence), for at most a minute: less than the stream's
// duplicate window, so a retry can never store the message twice.
func (g *Generator) publish(subject, task, key, id string) error {
	deadline := time.Now().Add(time.Minute)
	backoff := time.NewTicker(100 * time.Millisecond)
	defer backoff.Stop()
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(g.inflight, 2*time.Second)
		ack, err := g.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte(key)}, jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			g.mu.Lock()
			g.counts[task][key]++
			g.last[task] = max(g.last[task], ack.Sequence)
			g.sent++
			g.retries += attempt
			g.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("publish %s to %s: not acknowledged after a minute of retries: %w", id, subject, err)
		}
		select {
		case <-g.inflight.Done():
			return fmt.Errorf("publish %s to %s: aborted before it was acknowledged: %w", id, subject, err)
		case <-backoff.C: // paces the retries of an unreachable server
		}
	}
}

// Counts returns a copy of the acknowledged counts: task → key → messages.
func (g *Generator) Counts() map[string]map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]map[string]uint64, len(g.counts))
	for t, ks := range g.counts {
		m := make(map[string]uint64, len(ks))
		for k, n := range ks {
			m[k] = n
		}
		out[t] = m
	}
	return out
}

// Ends returns, for each task, the input stream sequence of its last
// acknowledged message (0 if none): where its checkpoint must get to.
func (g *Generator) Ends() map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]uint64, len(g.tasks))
	for _, t := range g.tasks {
		out[t] = g.last[t]
	}
	return out
}

// Sent returns how many messages were acknowledged, and how many publish
// attempts were retried.
func (g *Generator) Sent() (sent, retries int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sent, g.retries
}

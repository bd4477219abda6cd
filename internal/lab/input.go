package lab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/countworker"
)

// InputKeys is how many distinct keys the generator draws from per task.
const InputKeys = 32

// inputTick paces the generator; ackTimeout bounds the wait for a
// message's acknowledgement.
const (
	inputTick  = 10 * time.Millisecond
	ackTimeout = 10 * time.Second
)

// Generator publishes the group's input: one key per message, round-robin
// over every task's subject at a steady rate, and remembers what it
// published so that the expected counts are exact. Start it, Stop it.
type Generator struct {
	js    jetstream.JetStream
	group string
	tasks []assign.Task

	mu        sync.Mutex
	rng       *rand.Rand
	published map[string][]published // per task, in sequence order
	total     uint64
	next      int // index of the task the next message goes to
	err       error
	cancel    context.CancelFunc
	done      chan struct{}
}

// published is one input message: its stream sequence and key index.
type published struct {
	seq uint64
	key uint16
}

func newGenerator(js jetstream.JetStream, group string, tasks []assign.Task, seed uint64) *Generator {
	return &Generator{
		js: js, group: group, tasks: tasks,
		rng:       rand.New(rand.NewPCG(seed, 0x1ab)),
		published: map[string][]published{},
	}
}

// InputKey is the key of index i.
func InputKey(i int) string { return "k" + strconv.Itoa(i) }

// Start publishes rate messages per second over all tasks until Stop. A
// generator already started is left alone.
func (g *Generator) Start(rate int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancel != nil || rate <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel, g.done = cancel, make(chan struct{})
	go func() {
		defer close(g.done)
		g.run(ctx, rate)
	}()
}

// Stop stops publishing and waits for the acknowledgements in flight. It
// returns the first publish error, if any.
func (g *Generator) Stop() error {
	g.mu.Lock()
	cancel, done := g.cancel, g.done
	g.cancel = nil
	g.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

func (g *Generator) run(ctx context.Context, rate int) {
	t := time.NewTicker(inputTick)
	defer t.Stop()
	start := time.Now()
	var sent int64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due := int64(now.Sub(start).Seconds() * float64(rate))
			n := int(min(due-sent, int64(rate))) // after a stall, catch up at most a second
			if n <= 0 {
				continue
			}
			if err := g.Publish(ctx, n); err != nil {
				if ctx.Err() == nil {
					g.mu.Lock()
					if g.err == nil {
						g.err = err
					}
					g.mu.Unlock()
				}
				return
			}
			sent = max(sent+int64(n), due-int64(rate))
		}
	}
}

// Publish sends n messages now, round-robin over the tasks, and records
// each one the server acknowledges. Start calls it on a ticker; a test may
// call it itself. It returns ctx's error if ctx ended meanwhile, after
// waiting for the acknowledgements of what it sent.
func (g *Generator) Publish(ctx context.Context, n int) error {
	type sent struct {
		task string
		key  uint16
		ack  jetstream.PubAckFuture
	}
	batch := make([]sent, 0, n)
	for range n {
		g.mu.Lock()
		task := g.tasks[g.next%len(g.tasks)].ID
		g.next++
		key := uint16(g.rng.IntN(InputKeys))
		g.mu.Unlock()
		ack, err := g.js.PublishAsync(countworker.InputSubject(g.group, task), []byte(InputKey(int(key))))
		if err != nil {
			return fmt.Errorf("lab: publish input: %w", err)
		}
		batch = append(batch, sent{task, key, ack})
	}
	// Every message sent is waited for, even after ctx ended: a message
	// the server stored but the generator forgot would make the counts
	// look wrong.
	timeout := time.NewTimer(ackTimeout)
	defer timeout.Stop()
	for _, s := range batch {
		select {
		case a := <-s.ack.Ok():
			g.mu.Lock()
			g.published[s.task] = append(g.published[s.task], published{seq: a.Sequence, key: s.key})
			g.total++
			g.mu.Unlock()
		case err := <-s.ack.Err():
			return fmt.Errorf("lab: publish input to %s: %w", s.task, err)
		case <-timeout.C:
			return fmt.Errorf("lab: publish input to %s: no acknowledgement after %s", s.task, ackTimeout)
		}
	}
	return ctx.Err()
}

// Published is how many input messages have been acknowledged.
func (g *Generator) Published() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total
}

// Last returns each task's last published input sequence.
func (g *Generator) Last() map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]uint64, len(g.published))
	for task, ps := range g.published {
		if len(ps) > 0 {
			out[task] = ps[len(ps)-1].seq
		}
	}
	return out
}

// Expected returns how often each key occurs in task's input up to input
// sequence upTo, and how many messages that is.
func (g *Generator) Expected(task string, upTo uint64) (map[string]uint64, uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	counts := map[string]uint64{}
	var n uint64
	for _, p := range g.published[task] {
		if p.seq > upTo {
			break
		}
		counts[InputKey(int(p.key))]++
		n++
	}
	return counts, n
}

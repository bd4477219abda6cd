package record

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/countworker"
)

// DefaultKeys is how many distinct keys the generator draws from per task
// unless told otherwise.
const DefaultKeys = 32

// The generator's pacing and patience.
const (
	inputTick = 10 * time.Millisecond
	// ackWait bounds the wait for a batch's acknowledgements before the
	// messages not acknowledged are published again, one by one.
	ackWait = 5 * time.Second
	// retryFor bounds the retries of one message: less than the input
	// stream's duplicate window (2 minutes by default), so that a retry
	// can never store a message twice.
	retryFor     = time.Minute
	retryTimeout = 2 * time.Second
	retryEvery   = 100 * time.Millisecond
)

// GeneratorOptions configure a Generator.
type GeneratorOptions struct {
	Group string
	// Tasks are the tasks whose input the generator publishes, round-robin.
	Tasks []string
	// Keys is how many distinct keys a task's input draws from;
	// DefaultKeys if zero.
	Keys int
	// Seed makes the keys reproducible.
	Seed uint64
}

// Generator publishes a group's input to input.<group>.<task>
// (countworker.InputSubject): one key per message, round-robin over the
// tasks at a steady rate. It remembers, exactly, every message JetStream
// acknowledged: its input sequence, its key and when it was published.
// Every message carries a unique Nats-Msg-Id and is published again with
// the same ID until acknowledged, so that a publish whose acknowledgement
// was lost (a NATS restart) is stored once and remembered once. Start it,
// Stop it; it is safe for concurrent use.
type Generator struct {
	js   jetstream.JetStream
	opts GeneratorOptions

	// inflight ends the retries of the messages in flight (Abort).
	inflight       context.Context
	cancelInflight context.CancelFunc

	mu        sync.Mutex
	rng       *rand.Rand
	published map[string][]published // per task, in the order acknowledged
	sent      map[string]int         // per task, messages handed to the client (their IDs)
	total     int
	retries   int
	next      int // index of the task the next message goes to
	err       error
	cancel    context.CancelFunc
	done      chan struct{}
}

// published is one acknowledged input message.
type published struct {
	seq uint64
	key uint16
	at  time.Time
}

// NewGenerator returns a generator that publishes nothing until Start or
// Publish.
func NewGenerator(js jetstream.JetStream, o GeneratorOptions) *Generator {
	if o.Keys <= 0 {
		o.Keys = DefaultKeys
	}
	g := &Generator{js: js, opts: o,
		rng:       rand.New(rand.NewPCG(o.Seed, 0x1ab)),
		published: map[string][]published{}, sent: map[string]int{},
	}
	g.inflight, g.cancelInflight = context.WithCancel(context.Background())
	return g
}

// InputKey is the key of index i.
func InputKey(i int) string { return "k" + strconv.Itoa(i) }

// Start publishes rate messages per second over all tasks until Stop. A
// generator already started, or a rate of 0, is left alone.
func (g *Generator) Start(rate int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancel != nil || rate <= 0 || len(g.opts.Tasks) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel, g.done = cancel, make(chan struct{})
	go func() {
		defer close(g.done)
		g.run(ctx, rate)
	}()
}

// Stop stops publishing and waits until every message in flight has been
// acknowledged; it returns the first publish error, if any (one that could
// not be acknowledged, for one).
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

// Abort stops publishing without waiting for the messages in flight; what
// the generator remembers is then uncertain. For cleanups.
func (g *Generator) Abort() {
	g.cancelInflight()
	_ = g.Stop()
}

// run publishes at rate: every tick, what the rate allows since the start
// (after a stall, it catches up at most a second).
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
			n := int(min(due-sent, int64(rate)))
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

// pending is a message handed to the client, not yet acknowledged.
type pending struct {
	task string
	key  uint16
	msg  *nats.Msg
	id   string
	at   time.Time
	ack  jetstream.PubAckFuture // nil: publish it again
}

// Publish sends n messages now, round-robin over the tasks, and remembers
// each one JetStream acknowledges. Start calls it on a ticker; a test may
// call it itself. Every message sent is waited for, even after ctx ended
// (a message the server stored but the generator forgot would make the
// counts look wrong); it returns ctx's error if ctx ended meanwhile.
func (g *Generator) Publish(ctx context.Context, n int) error {
	batch := make([]pending, 0, n)
	for range n {
		g.mu.Lock()
		task := g.opts.Tasks[g.next%len(g.opts.Tasks)]
		g.next++
		key := uint16(g.rng.IntN(g.opts.Keys))
		id := task + "-" + strconv.Itoa(g.sent[task])
		g.sent[task]++
		g.mu.Unlock()
		p := pending{task: task, key: key, id: id, at: time.Now(),
			msg: &nats.Msg{Subject: countworker.InputSubject(g.opts.Group, task), Data: []byte(InputKey(int(key)))}}
		if f, err := g.js.PublishMsgAsync(p.msg, jetstream.WithMsgID(id)); err == nil {
			p.ack = f
		}
		batch = append(batch, p)
	}
	timeout := time.NewTimer(ackWait)
	defer timeout.Stop()
	late := false // past ackWait: what is not acknowledged yet is published again
	for _, p := range batch {
		seq, ok := uint64(0), false
		switch {
		case p.ack != nil && late:
			select {
			case a := <-p.ack.Ok():
				seq, ok = a.Sequence, true
			default:
			}
		case p.ack != nil:
			select {
			case a := <-p.ack.Ok():
				seq, ok = a.Sequence, true
			case <-p.ack.Err():
			case <-timeout.C:
				late = true
			}
		}
		if !ok {
			var err error
			if seq, err = g.retry(p); err != nil {
				return err
			}
		}
		g.mu.Lock()
		g.published[p.task] = append(g.published[p.task], published{seq: seq, key: p.key, at: p.at})
		g.total++
		g.mu.Unlock()
	}
	return ctx.Err()
}

// retry publishes p again, with its message ID, until JetStream
// acknowledges it (a duplicate's acknowledgement names the original's
// sequence), for at most retryFor.
func (g *Generator) retry(p pending) (uint64, error) {
	deadline := time.Now().Add(retryFor)
	every := time.NewTicker(retryEvery)
	defer every.Stop()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(g.inflight, retryTimeout)
		ack, err := g.js.PublishMsg(ctx, p.msg, jetstream.WithMsgID(p.id))
		cancel()
		g.mu.Lock()
		g.retries++
		g.mu.Unlock()
		if err == nil {
			return ack.Sequence, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("record: publish %s to %s: not acknowledged after %d attempts in %s: %w", p.id, p.msg.Subject, attempt, retryFor, err)
		}
		select {
		case <-g.inflight.Done():
			return 0, fmt.Errorf("record: publish %s to %s: aborted before it was acknowledged: %w", p.id, p.msg.Subject, err)
		case <-every.C: // paces the retries of an unreachable server
		}
	}
}

// Sent returns how many messages were acknowledged, and how many publish
// attempts were retries.
func (g *Generator) Sent() (sent, retries int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total, g.retries
}

// Ends returns, for each task, the input sequence of its last acknowledged
// message (0 if none): where its checkpoint must get to.
func (g *Generator) Ends() map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]uint64, len(g.opts.Tasks))
	for _, task := range g.opts.Tasks {
		out[task] = 0
		for _, p := range g.published[task] {
			out[task] = max(out[task], p.seq)
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
		if p.seq <= upTo {
			counts[InputKey(int(p.key))]++
			n++
		}
	}
	return counts, n
}

// Inputs returns every acknowledged message of task: its input sequence
// and when it was published (before its first publish attempt, by this
// machine's wall clock).
func (g *Generator) Inputs(task string) []Input {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Input, len(g.published[task]))
	for i, p := range g.published[task] {
		out[i] = Input{Task: task, Seq: p.seq, Published: p.at}
	}
	return out
}

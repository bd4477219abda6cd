package conformance

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The counting job's input, as the example workers read it: task T of
// group G has subject input.G.T of stream INPUT_G. The names are the
// workers' contract (docs/api.md), written out here so that the binary
// links no worker; a test keeps them equal to countworker's.
func inputStream(group string) string        { return "INPUT_" + group }
func inputSubject(group, task string) string { return "input." + group + "." + task }

// createStream creates group's input stream on the run's NATS server.
func createStream(ctx context.Context, js jetstream.JetStream, group string) error {
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     inputStream(group),
		Subjects: []string{inputSubject(group, ">")},
		Storage:  jetstream.FileStorage,
	}); err != nil {
		return fmt.Errorf("create input stream %s: %w", inputStream(group), err)
	}
	return nil
}

// inputKeys are the keys the producer draws from. One has a slash, a space
// and a percent sign, so that a worker that reads it back must
// percent-encode the key in GET /tasks/{id}/state/{key}.
var inputKeys = []string{"apple", "banana", "cherry", "date", "elder", "fig", "grape", "a/b c%"}

// producer publishes the conformance job's input: one key per message on
// each task's subject, at a steady rate, and remembers what it published so
// that every commit can be checked against the exact counts.
type producer struct {
	js    jetstream.JetStream
	group string
	tasks []string
	every time.Duration // between two rounds over the tasks

	mu        sync.Mutex
	published map[string][]message // per task, in sequence order
	err       error
}

// message is one published input message.
type message struct {
	seq uint64
	key string
	at  time.Time
}

// run publishes until ctx ends, then returns the first publish error.
func (p *producer) run(ctx context.Context) error {
	t := time.NewTicker(p.every)
	defer t.Stop()
	n := 0
	for {
		for _, task := range p.tasks {
			key := inputKeys[(n*7+len(task)+int(task[len(task)-1]))%len(inputKeys)]
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ack, err := p.js.Publish(pctx, inputSubject(p.group, task), []byte(key))
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return fmt.Errorf("publish the input of task %s: %w", task, err)
			}
			p.mu.Lock()
			p.published[task] = append(p.published[task], message{seq: ack.Sequence, key: key, at: time.Now()})
			p.mu.Unlock()
		}
		n++
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// input returns what was published for task.
func (p *producer) input(task string) []message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published[task]
}

// counts is a task's expected state: the count of each key in the input up
// to a sequence.
type counts struct{ msgs []message }

// upTo returns the count of key among the messages with sequence <= seq,
// and whether seq is the sequence of one of them (a checkpoint this job's
// workers can write).
func (c counts) upTo(seq uint64, key string) (n uint64, known bool) {
	i := sort.Search(len(c.msgs), func(i int) bool { return c.msgs[i].seq > seq })
	for _, m := range c.msgs[:i] {
		if m.key == key {
			n++
		}
	}
	return n, i > 0 && c.msgs[i-1].seq == seq
}

// checkPuts checks a commit's puts against the counts up to checkpoint
// seq; it returns what is wrong, or "".
func (c counts) checkPuts(seq uint64, puts map[string]string) string {
	if _, known := c.upTo(seq, ""); !known && seq != 0 {
		return fmt.Sprintf("its checkpoint is input sequence %d, which is not a message of the task", seq)
	}
	keys := make([]string, 0, len(puts))
	for k := range puts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		want, _ := c.upTo(seq, k)
		if puts[k] != strconv.FormatUint(want, 10) {
			return fmt.Sprintf("it wrote %q = %q, but the input up to its checkpoint (sequence %d) has %q %d times", k, puts[k], seq, k, want)
		}
	}
	return ""
}

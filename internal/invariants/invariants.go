// Package invariants checks, from a group's changelog, what handoff
// promises: that the accepted commits of every task form one chain with a
// single writer per epoch, and what state a full replay gives. The agent's
// tests, the scenario harness, the demo and the benchmark share it; it is
// its own package because none of them is its home.
package invariants

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/changelog"
)

// Record is one changelog message of a task.
type Record struct {
	Seq   uint64
	Entry changelog.Entry
}

// ReadTask reads every message of a task's changelog, in order.
func ReadTask(ctx context.Context, js jetstream.JetStream, group, task string) ([]Record, error) {
	stream, err := js.Stream(ctx, changelog.StreamName(group))
	if err != nil {
		return nil, fmt.Errorf("open changelog of %s: %w", group, err)
	}
	subject := changelog.Subject(group, task)
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last message of %s: %w", task, err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", task, err)
	}
	var out []Record
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", task, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", task, err)
			}
			e, err := changelog.Decode(m.Data())
			if err != nil {
				return nil, fmt.Errorf("task %s seq %d: %w", task, md.Sequence.Stream, err)
			}
			out = append(out, Record{Seq: md.Sequence.Stream, Entry: e})
			if md.Sequence.Stream >= last.Sequence {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read %s: %w", task, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("read %s: stopped at %d messages before seq %d", task, len(out), last.Sequence)
		}
	}
}

// Chain summarizes a task's changelog.
type Chain struct {
	Task    string
	Commits int
	Markers int
	// Epochs lists the epochs of the markers, in order.
	Epochs []uint64
	// Violations describes every break of the one-writer chain: a marker
	// whose epoch goes down, or a commit whose epoch is not the epoch of
	// the latest marker before it (a stale owner's write that got in).
	Violations []string
}

// CheckChain checks that recs form one chain: markers' epochs never go
// down, and every commit carries the epoch of the latest marker.
func CheckChain(task string, recs []Record) Chain {
	c := Chain{Task: task}
	var epoch uint64
	seen := false
	for _, r := range recs {
		switch r.Entry.Kind {
		case changelog.KindEpoch:
			c.Markers++
			if seen && r.Entry.Epoch < epoch {
				c.Violations = append(c.Violations, fmt.Sprintf("seq %d: epoch marker %d after epoch %d", r.Seq, r.Entry.Epoch, epoch))
			}
			epoch, seen = r.Entry.Epoch, true
			c.Epochs = append(c.Epochs, r.Entry.Epoch)
		case changelog.KindCommit:
			c.Commits++
			switch {
			case !seen:
				c.Violations = append(c.Violations, fmt.Sprintf("seq %d: commit at epoch %d before any epoch marker", r.Seq, r.Entry.Epoch))
			case r.Entry.Epoch != epoch:
				c.Violations = append(c.Violations, fmt.Sprintf("seq %d: commit at epoch %d while epoch %d owns the task", r.Seq, r.Entry.Epoch, epoch))
			}
		}
	}
	return c
}

// State is a task's state as a full replay gives it.
type State struct {
	Data       map[string][]byte
	Checkpoint []byte
	Epoch      uint64
	LastSeq    uint64
}

// Replay applies recs in order.
func Replay(recs []Record) State {
	s := State{Data: map[string][]byte{}}
	for _, r := range recs {
		for _, kv := range r.Entry.Puts {
			s.Data[string(kv.Key)] = append([]byte(nil), kv.Value...)
		}
		for _, k := range r.Entry.Deletes {
			delete(s.Data, string(k))
		}
		if len(r.Entry.Checkpoint) > 0 {
			s.Checkpoint = append([]byte(nil), r.Entry.Checkpoint...)
		}
		s.Epoch = r.Entry.Epoch
		s.LastSeq = r.Seq
	}
	return s
}

// Acked is a commit a worker was told succeeded.
type Acked struct {
	Task  string
	Seq   uint64
	Epoch uint64
}

// MissingAcks returns the acknowledged commits that are not in recs as a
// commit of the same epoch: each one is a lost acknowledged write.
func MissingAcks(recs []Record, acks []Acked) []Acked {
	bySeq := make(map[uint64]changelog.Entry, len(recs))
	for _, r := range recs {
		bySeq[r.Seq] = r.Entry
	}
	var missing []Acked
	for _, a := range acks {
		e, ok := bySeq[a.Seq]
		if !ok || e.Kind != changelog.KindCommit || e.Epoch != a.Epoch {
			missing = append(missing, a)
		}
	}
	return missing
}

package changelog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// This file reads a task's changelog from outside a member, as checkers of
// a finished run do (the examples' producer verify, the scenario harness,
// the demo): every message in order, and the state a full replay gives.

// ConsumerInactive is how long the server keeps a changelog consumer that
// nobody pulls from. Every reader of a changelog (restores, tailers, this
// file's readers, the snapshot trim) sets it on its ordered consumer: the
// client library's default of 5 minutes kept every stopped reader's
// consumer that long (an ordered consumer is deleted only when it is
// replaced), and a stream holds at most 1,000 consumers by default on
// nats-server 2.12 and later, so that a large group restoring many tasks
// within 5 minutes was refused new ones. A reader that pulls is never
// idle: its pull requests waiting on the server count as activity.
const ConsumerInactive = 10 * time.Second

// Record is one changelog message of a task.
type Record struct {
	Seq   uint64
	Entry Entry
}

// ReadTask reads every message of a task's changelog, in order.
func ReadTask(ctx context.Context, js jetstream.JetStream, group, task string) ([]Record, error) {
	stream, err := js.Stream(ctx, StreamName(group))
	if err != nil {
		return nil, fmt.Errorf("open changelog of %s: %w", group, err)
	}
	subject := Subject(group, task)
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last message of %s: %w", task, err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, InactiveThreshold: ConsumerInactive})
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
			e, err := Decode(m.Data())
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

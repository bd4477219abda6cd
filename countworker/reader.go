package countworker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// readAhead is the most messages a reader buffers: a prepared one keeps the
// newest, a task's input stops pulling until the task has read some.
const readAhead = 1000

// reader reads one task's input subject in a goroutine of its own, from an
// ordered consumer, into a buffer the task reads. While the task is a
// learner or standby here it reads ahead (prepared: the consumer exists,
// is positioned and delivering) and keeps the newest readAhead messages;
// once the task is active here it keeps every message (keepAll), and the
// task starts on it if it still holds everything after the task's
// checkpoint (resumeAt).
type reader struct {
	subject string
	// start is the first input sequence its consumer delivers from.
	start uint64
	msgs  jetstream.MessagesContext
	buf   chan jetstream.Msg
	stop  chan struct{}
	done  chan struct{} // closed when the goroutine has ended; err is set then
	err   error

	// mu guards keepAll and dropped: the goroutine drops a message from a
	// full buffer only while it holds mu and keepAll is false, so that no
	// message is dropped once the task reads the buffer.
	mu      sync.Mutex
	keepAll bool
	dropped uint64 // the highest sequence dropped while reading ahead

	// skip is the task's checkpoint: next drops the messages up to it.
	// Only the task's goroutine uses it.
	skip uint64
}

// openReader starts a reader of subject from input sequence start (at
// least 1) on a new ordered consumer. keepAll makes it a task's input at
// once; otherwise it reads ahead.
func (w *counter) openReader(ctx context.Context, subject string, start uint64, keepAll bool) (*reader, error) {
	msgs, err := w.consume(ctx, subject, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    max(start, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("consume %s from seq %d: %w", subject, max(start, 1), err)
	}
	r := &reader{
		subject: subject,
		start:   max(start, 1),
		msgs:    msgs,
		buf:     make(chan jetstream.Msg, readAhead),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		keepAll: keepAll,
	}
	go r.run()
	return r, nil
}

// run moves the consumer's messages into the buffer until the reader is
// closed or the consumer fails.
func (r *reader) run() {
	defer close(r.done)
	for {
		m, err := r.msgs.Next()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				r.err = err
			}
			return
		}
		if !r.put(m) {
			return
		}
	}
}

// put adds m to the buffer: reading ahead, it drops the oldest message of
// a full buffer; as the task's input it waits for room (or the close).
func (r *reader) put(m jetstream.Msg) bool {
	r.mu.Lock()
	if !r.keepAll {
		if len(r.buf) == cap(r.buf) {
			old := <-r.buf
			if md, err := old.Metadata(); err == nil {
				r.dropped = max(r.dropped, md.Sequence.Stream)
			} else {
				r.dropped = ^uint64(0) // unknown: covers nothing any more
			}
		}
		r.buf <- m
		r.mu.Unlock()
		return true
	}
	r.mu.Unlock()
	select {
	case r.buf <- m:
		return true
	case <-r.stop:
		return false
	}
}

// resumeAt makes the reader the input of a task that starts after input
// sequence from, and reports whether it holds every message of its subject
// after from: it dropped none of them, and it started at or before from+1
// or the subject has no message between from+1 and its start (one direct
// get asks the stream). A reader that does not is of no use: close it.
func (r *reader) resumeAt(ctx context.Context, w *counter, from uint64) (bool, error) {
	r.mu.Lock()
	r.keepAll = true
	dropped := r.dropped
	r.mu.Unlock()
	select {
	case <-r.done:
		return false, nil // it failed: a new consumer will do
	default:
	}
	if dropped > from {
		return false, nil
	}
	if r.start > from+1 {
		s, err := w.inputStream(ctx)
		if err != nil {
			return false, err
		}
		m, err := s.GetMsg(ctx, from+1, jetstream.WithGetMsgSubject(r.subject))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return false, fmt.Errorf("read %s after seq %d: %w", r.subject, from, err)
		case m.Sequence < r.start:
			return false, nil
		}
	}
	r.skip = from
	return true, nil
}

// buffered is how many messages the task can read without waiting.
func (r *reader) buffered() int { return len(r.buf) }

// next returns the next message after the task's checkpoint, waiting until
// ctx ends (its error then).
func (r *reader) next(ctx context.Context) (jetstream.Msg, error) {
	for {
		var m jetstream.Msg
		select {
		case m = <-r.buf:
		case <-r.done:
			select {
			case m = <-r.buf:
			default:
				if r.err != nil {
					return nil, r.err
				}
				return nil, jetstream.ErrMsgIteratorClosed
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if r.skip > 0 {
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			if md.Sequence.Stream <= r.skip {
				continue
			}
		}
		return m, nil
	}
}

// Close stops the consumer and waits for the goroutine; it implements
// io.Closer, so that the runner closes a preparation it does not hand to a
// task. It may be called more than once.
func (r *reader) Close() error {
	select {
	case <-r.stop:
	default:
		close(r.stop)
		r.msgs.Stop()
	}
	<-r.done
	return nil
}

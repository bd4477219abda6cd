package countworker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/httpapi"
)

// maxKeyBytes is the agent's default key limit; longer keys are skipped
// (a commit with one would be refused and the task would never progress).
const maxKeyBytes = httpapi.DefaultMaxKeyBytes

// counter is the worker. process runs once per active task (client.Run
// calls it in a goroutine per task); the rest is shared and read-only.
type counter struct {
	js       jetstream.JetStream
	stream   string
	group    string
	batch    int
	maxDelay time.Duration
	noCache  bool // read every batch's counts from the sidecar
	events   *eventLog
	log      zerolog.Logger

	streamMu sync.Mutex
	streamH  jetstream.Stream // the input stream, looked up on first use
}

// pending is the part of a task's input read but not yet committed.
type pending struct {
	adds    map[string]uint64 // key → occurrences in this batch
	records int               // messages in this batch
	lastSeq uint64            // input sequence of the batch's last message
	first   time.Time         // when the batch's first message was read
}

// process counts one task's input until the task is stopped. It is a
// client.TaskFunc: when ctx ends it commits what it has read and returns.
func (w *counter) process(ctx context.Context, t client.Task) error {
	if !t.Stateful {
		closePrepared(t.Prepared)
		return w.processStateless(ctx, t)
	}
	from, err := DecodeCheckpoint(t.Checkpoint)
	if err != nil {
		closePrepared(t.Prepared)
		return fmt.Errorf("task %s: %w", t.ID, err)
	}
	log := w.log.With().Str("task", t.ID).Uint64("epoch", t.Epoch).Logger()
	subject := InputSubject(w.group, t.ID)
	in, err := w.input(ctx, t, subject, from, log)
	if err != nil {
		return err
	}
	defer in.Close()

	// counts caches the committed count of each key seen since this task
	// started here (nil with noCache: nothing is kept). It starts empty:
	// after a hand-off the counts are in the sidecar's state, not here,
	// and are read there on first use.
	var counts map[string]uint64
	if !w.noCache {
		counts = map[string]uint64{}
	}
	p := pending{adds: map[string]uint64{}}
	// The first commit after the start does not wait for the batching
	// delay: it is made as soon as the messages already there are read.
	first := true
	for {
		msg, err := w.next(ctx, in, &p)
		switch {
		case ctx.Err() != nil:
			// Revoked, moved or shutting down: the final commit. Task's
			// methods still work although ctx has ended.
			return w.commit(ctx, t, counts, &p)
		case errors.Is(err, context.DeadlineExceeded):
			if err := w.commit(ctx, t, counts, &p); err != nil {
				return err
			}
			continue
		case err != nil:
			return fmt.Errorf("read %s: %w", subject, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("read %s: %w", subject, err)
		}
		p.add(msg.Data(), meta.Sequence.Stream, log)
		if p.records >= w.batch || first && in.buffered() == 0 {
			if err := w.commit(ctx, t, counts, &p); err != nil {
				return err
			}
			first = false
		}
	}
}

// input returns the reader of a stateful task's input from the message
// after checkpoint from: the one prepared while the task was a learner or
// standby here when it holds every message after from, a new one
// otherwise.
func (w *counter) input(ctx context.Context, t client.Task, subject string, from uint64, log zerolog.Logger) (*reader, error) {
	if r, ok := t.Prepared.(*reader); ok {
		covers, err := r.resumeAt(ctx, w, from)
		if covers {
			log.Info().Uint64("from", from+1).Int("buffered", r.buffered()).Msg("task starts on its prepared input")
			return r, nil
		}
		if err != nil {
			log.Warn().Err(err).Msg("check the prepared input; reading anew")
		} else {
			log.Info().Uint64("from", from+1).Uint64("prepared", r.start).Msg("the prepared input lacks messages after the checkpoint; reading anew")
		}
		r.Close()
	} else {
		closePrepared(t.Prepared)
	}
	return w.openReader(ctx, subject, from+1, true)
}

// prepare is the worker's client.PrepareFunc: while a stateful task is a
// learner or standby here, its input's consumer is made and reads ahead,
// from the checkpoint the agent hints at or else from the stream's end, so
// that the task starts on it when it becomes active here.
func (w *counter) prepare(ctx context.Context, info client.PrepareInfo) (any, error) {
	var start uint64
	if cp, err := DecodeCheckpoint(info.Checkpoint); err == nil && len(info.Checkpoint) > 0 {
		start = cp + 1
	} else {
		s, err := w.inputStream(ctx)
		if err != nil {
			return nil, err
		}
		si, err := s.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the end of input stream %s: %w", w.stream, err)
		}
		start = si.State.LastSeq + 1
	}
	r, err := w.openReader(ctx, InputSubject(w.group, info.ID), start, false)
	if err != nil {
		return nil, err // not a nil *reader: the runner would close it
	}
	return r, nil
}

// inputStream returns the input stream, looked up once.
func (w *counter) inputStream(ctx context.Context) (jetstream.Stream, error) {
	w.streamMu.Lock()
	defer w.streamMu.Unlock()
	if w.streamH != nil {
		return w.streamH, nil
	}
	s, err := w.js.Stream(ctx, w.stream)
	if err != nil {
		return nil, fmt.Errorf("look up input stream %s: %w", w.stream, err)
	}
	w.streamH = s
	return s, nil
}

// closePrepared closes a preparation the task does not use.
func closePrepared(v any) {
	if c, ok := v.(io.Closer); ok {
		_ = c.Close() // a reader's Close never fails
	}
}

// processStateless counts a stateless task's input in memory from the
// newest message on, until the task is stopped. Nothing is committed: a
// stateless task has no state in the sidecar.
func (w *counter) processStateless(ctx context.Context, t client.Task) error {
	subject := InputSubject(w.group, t.ID)
	msgs, err := w.consume(ctx, subject, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return fmt.Errorf("consume %s: %w", subject, err)
	}
	defer msgs.Stop()
	counts := map[string]uint64{}
	for {
		msg, err := msgs.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", subject, err)
		}
		counts[string(msg.Data())]++
	}
}

// consume opens an ordered consumer on the input stream. The server drops
// it 10 s after the counter stops pulling (the client's default is 5
// minutes): a task that moves leaves no consumer behind to count against
// the stream's limit (1,000 by default on nats-server 2.12 and later).
func (w *counter) consume(ctx context.Context, subject string, cfg jetstream.OrderedConsumerConfig) (jetstream.MessagesContext, error) {
	cfg.InactiveThreshold = 10 * time.Second
	cons, err := w.js.OrderedConsumer(ctx, w.stream, cfg)
	if err != nil {
		return nil, err
	}
	return cons.Messages(jetstream.PullMaxMessages(2 * w.batch))
}

// next waits for the next message; once the batch holds a message, only
// until the batch is due (context.DeadlineExceeded then).
func (w *counter) next(ctx context.Context, in *reader, p *pending) (jetstream.Msg, error) {
	if p.records == 0 {
		return in.next(ctx)
	}
	due, cancel := context.WithDeadline(ctx, p.first.Add(w.maxDelay))
	defer cancel()
	return in.next(due)
}

func (p *pending) add(key []byte, seq uint64, log zerolog.Logger) {
	if p.records == 0 {
		p.first = time.Now()
	}
	p.records++
	p.lastSeq = seq
	if len(key) == 0 || len(key) > maxKeyBytes {
		log.Warn().Uint64("seq", seq).Int("bytes", len(key)).Msg("skipping a message whose key is empty or too long")
		return
	}
	p.adds[string(key)]++
}

// commit writes the new counts of the batch's keys and the batch's last
// sequence as the checkpoint, in one commit, then starts a new batch. The
// counts it does not hold (all of them without a cache) are read in one
// batch get first. The cache is updated only once the commit is
// acknowledged.
func (w *counter) commit(ctx context.Context, t client.Task, counts map[string]uint64, p *pending) error {
	if p.records == 0 {
		return nil
	}
	keys := make([]string, 0, len(p.adds))
	for k := range p.adds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var missing [][]byte
	for _, k := range keys {
		if _, ok := counts[k]; !ok {
			missing = append(missing, []byte(k))
		}
	}
	read, err := readCounts(ctx, t, missing)
	if err != nil {
		return err
	}
	next := make(map[string]uint64, len(keys))
	puts := make([]api.KV, 0, len(keys))
	for _, k := range keys {
		cur, ok := counts[k]
		if !ok {
			cur = read[k]
		}
		next[k] = cur + p.adds[k]
		puts = append(puts, api.KV{Key: []byte(k), Value: strconv.AppendUint(nil, next[k], 10)})
	}
	res, err := t.Commit(ctx, puts, nil, EncodeCheckpoint(p.lastSeq))
	if err != nil {
		return err // client.Run stops the task on not_owner and restarts it otherwise
	}
	if counts != nil {
		for k, n := range next {
			counts[k] = n
		}
	}
	w.events.add(Event{Kind: client.EventCommit, Task: t.ID, Epoch: t.Epoch, Seq: res.Seq, Checkpoint: p.lastSeq, Records: p.records})
	*p = pending{adds: map[string]uint64{}}
	return nil
}

// readCounts reads the committed counts of keys from the sidecar in one
// batch get; a key it does not hold counts 0.
func readCounts(ctx context.Context, t client.Task, keys [][]byte) (map[string]uint64, error) {
	out := make(map[string]uint64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	vals, err := t.GetMany(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("read the counts of %d keys in task %s: %w", len(keys), t.ID, err)
	}
	for i, v := range vals {
		if v == nil {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("count of %q in task %s is %q, not a decimal number: %w", keys[i], t.ID, v, err)
		}
		out[string(keys[i])] = n
	}
	return out, nil
}

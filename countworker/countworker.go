// Package countworker is a complete handoff worker, importable: it counts
// how often each key occurs in its tasks' input and keeps the counts in the
// sidecar's state, exactly once, across hand-offs.
//
// It is a public package of its own, not the internals of an example,
// because two programs run it: examples/counter wraps it in a command, and
// handoff's demo and bench (internal/lab) run it in process. Both import it
// as a user would, so the shipped binary links no example, and
// examples/counter, which imports only public packages, can be copied out
// of the repository as it is.
//
// Input is a JetStream stream (StreamName(group) by default) with a subject
// per task, InputSubject(group, task); each message's body is one key. For
// every stateful task active on its member, the worker reads the task's
// subject from the checkpoint on, and every Options.Batch messages or
// Options.MaxDelay commits {key: decimal count} for the keys it saw, with
// the stream sequence of the last message as the checkpoint (8 bytes,
// big-endian). A revoked task commits what it has and is released; a new
// owner resumes from the checkpoint. Run returns nil once the sidecar says
// shutdown.
//
// While a stateful task is a learner or standby on its member, the worker
// prepares its input (client.RunOptions.Prepare): the consumer is made,
// positioned at the checkpoint the sidecar hints at (else at the stream's
// end) and reads ahead, keeping the newest messages, so that when the task
// becomes active the worker counts at once from its checkpoint, with no
// consumer to create or first pull to wait for; it reads anew only if the
// prepared input lacks a message after the checkpoint. The first commit
// after a start is made as soon as the messages already read are counted,
// without waiting for Options.MaxDelay.
//
// The counts it needs are read from the sidecar with one batch get per
// commit: by default only those of keys it has not seen since the task
// started here (it remembers the counts it committed), with Options.NoCache
// every batch's, so that it holds no state at all: the read-modify-write
// worker whose state lives only in the sidecar.
//
// A stateless task has no state and no checkpoint: the worker reads its
// subject from the newest message on, as a stateless consumer without
// stored offsets would, and counts in memory only.
//
// # Events
//
// With Options.Events the worker writes one JSON object per line for each
// step of a task's life, for test harnesses and demos (Options.OnEvent gets
// the same as Event values). Every line has "t" (RFC 3339 time with
// nanoseconds) and "event"; the rest depends on the event:
//
//	{"event":"start",    "task","epoch","checkpoint"}              fn starts; checkpoint = input seq it resumes after
//	{"event":"commit",   "task","epoch","seq","checkpoint","records"} a commit was acknowledged: seq = changelog sequence,
//	                                                                  checkpoint = input seq reached, records = messages in it
//	{"event":"stop",     "task","epoch","checkpoint"}              the task stopped after its final commit, before its release
//	{"event":"release",  "task","epoch","seq"}                     the sidecar acknowledged the release; seq = last commit's
//	{"event":"refused",  "task","code"}                            the sidecar refused a commit (code "not_owner"): task dropped
//	{"event":"restart",  "task","epoch","error"}                   processing failed; the task restarts from its checkpoint
//	{"event":"shutdown"}                                            the sidecar said shutdown; the worker exits
//
// The hand-off pause of a task is the next owner's "start" minus the
// previous owner's "release".
package countworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/client"
)

// Defaults of Options.
const (
	DefaultBatch    = 100
	DefaultMaxDelay = 50 * time.Millisecond
)

// Options configure Run.
type Options struct {
	// Client talks to the member's sidecar. Required.
	Client *client.Client
	// JS reads the input stream. Required.
	JS jetstream.JetStream
	// Group names the input subjects: InputSubject(Group, task). Required.
	Group string
	// Stream is the input stream; empty means StreamName(Group).
	Stream string
	// Batch is the most messages per commit; 0 means DefaultBatch.
	Batch int
	// MaxDelay is the longest time a read message waits for its commit;
	// 0 means DefaultMaxDelay.
	MaxDelay time.Duration
	// NoCache makes the worker remember no counts: it reads every batch's
	// keys from the sidecar (one batch get), then commits.
	NoCache bool
	// PollWait is the long-poll's wait on GET /assignment; 0 means
	// client.DefaultPollWait. A hung worker's open poll keeps it attached
	// until the wait ends, so a shorter wait lets its agent notice sooner.
	PollWait time.Duration
	// Events, if set, receives the event log as JSON lines. A failed
	// write is logged once and does not stop the worker.
	Events io.Writer
	// OnEvent, if set, is called with every event, one call at a time
	// per task; it must return quickly, as it delays the task.
	OnEvent func(Event)
	Logger  zerolog.Logger
}

func (o *Options) setDefaults() error {
	switch {
	case o.Client == nil:
		return errors.New("countworker: no sidecar client")
	case o.JS == nil:
		return errors.New("countworker: no JetStream context for the input")
	case !ValidGroup(o.Group):
		return fmt.Errorf("countworker: group %q: use a name without dots, wildcards, spaces or slashes", o.Group)
	case o.Batch < 0:
		return fmt.Errorf("countworker: batch %d: commit at least 1 message at a time", o.Batch)
	case o.PollWait < 0:
		return fmt.Errorf("countworker: poll wait %v: use a positive duration such as 30s", o.PollWait)
	case o.MaxDelay < 0:
		return fmt.Errorf("countworker: max delay %v: use a positive duration such as 50ms", o.MaxDelay)
	}
	if o.Stream == "" {
		o.Stream = StreamName(o.Group)
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	return nil
}

// Run follows the member's assignment through client.Run and counts the
// input of every task active here, until the sidecar says shutdown or ctx
// ends (both return nil). It returns an error only for invalid Options.
func Run(ctx context.Context, o Options) error {
	if err := o.setDefaults(); err != nil {
		return err
	}
	w := &counter{
		js:       o.JS,
		stream:   o.Stream,
		group:    o.Group,
		batch:    o.Batch,
		maxDelay: o.MaxDelay,
		noCache:  o.NoCache,
		events:   &eventLog{w: o.Events, log: o.Logger, on: o.OnEvent},
		log:      o.Logger,
	}
	return client.Run(ctx, o.Client, w.process, client.RunOptions{Logger: o.Logger, OnEvent: w.onEvent, PollWait: o.PollWait, Prepare: w.prepare})
}

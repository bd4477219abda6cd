// Package changelog is a group's changelog on NATS JetStream: one stream per
// group, one subject per task, one message per commit. It owns the stream's
// settings, the binary encoding of a commit and the fenced append that keeps
// a stale owner from writing. It is a package of its own because both the
// writer (agent) and the reader (restore) use it and neither is its home.
package changelog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/handoffhq/handoff/internal/fence"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors callers branch on.
var (
	// ErrFenced is wrapped by Append's error when the subject's last
	// sequence is not the expected one: another writer has appended since.
	// errors.As gives the *FencedError.
	ErrFenced = errors.New("changelog: fenced by a newer append")
	// ErrTooLarge is wrapped by Append's error when the encoded entry does
	// not fit in one message of the server.
	ErrTooLarge = errors.New("changelog: entry larger than the server's max payload")
)

// FencedError says an append was refused because the task's subject had
// moved on: its last message is at Actual, not Expected.
type FencedError struct {
	Task     string
	Expected uint64
	// Actual is the subject's last sequence as the server reported it; 0
	// when the server's message did not say.
	Actual uint64
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("changelog: append to task %q fenced: expected last sequence %d, subject is at %d", e.Task, e.Expected, e.Actual)
}

// Is makes errors.Is(err, ErrFenced) hold.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Options configure a group's changelog.
type Options struct {
	Group string
	// Replicas is the stream's replica count; 0 means 1. Use 3 on a
	// 3-node cluster for durability.
	Replicas int
	// Storage is the stream's storage; the zero value is file storage.
	Storage jetstream.StorageType
}

// ValidGroup tells whether name can name a group: 1 to 64 of A-Z a-z 0-9 _ -.
func ValidGroup(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidTask tells whether id can name a task in a changelog subject: 1 to
// 255 bytes, none of them a space, a control character, '.', '*' or '>'.
func ValidTask(id string) bool {
	if len(id) == 0 || len(id) > 255 {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c <= ' ', c == 0x7f, c == '.', c == '*', c == '>':
			return false
		}
	}
	return true
}

// StreamName returns the name of group's changelog stream.
func StreamName(group string) string { return "HANDOFF_" + group }

// Subject returns the subject of task's changelog in group.
func Subject(group, task string) string { return "handoff." + group + ".log." + task }

func subjects(group string) []string { return []string{"handoff." + group + ".log.>"} }

// Log is a group's changelog. It is safe for concurrent use; appends to one
// task must be serialized by the caller (each names the sequence it expects
// to follow), appends to different tasks may run in parallel.
type Log struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	group  string
	// ackPrefix is how the stream's acknowledgement of a stored message
	// starts, up to its sequence (parseAck).
	ackPrefix []byte
}

// Open makes sure group's changelog stream exists with the settings of opts
// (creating it, or updating a stream whose settings differ) and returns it.
// Opening an existing stream with the same settings changes nothing.
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Log, error) {
	if !ValidGroup(opts.Group) {
		return nil, fmt.Errorf("open changelog: group %q must be 1 to 64 letters, digits, '_' or '-'", opts.Group)
	}
	replicas := opts.Replicas
	if replicas <= 0 {
		replicas = 1
	}
	name := StreamName(opts.Group)
	want := jetstream.StreamConfig{
		Name:               name,
		Description:        "handoff changelog of group " + opts.Group + ": one subject per task, one message per commit",
		Subjects:           subjects(opts.Group),
		Retention:          jetstream.LimitsPolicy,
		MaxConsumers:       MaxConsumers,
		MaxMsgs:            -1,
		MaxBytes:           -1,
		MaxMsgsPerSubject:  -1,
		MaxMsgSize:         -1,
		Discard:            jetstream.DiscardOld,
		Storage:            opts.Storage,
		Replicas:           replicas,
		AllowDirect:        true,
		AllowAtomicPublish: true,
	}

	stream, err := js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		stream, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // another member won the race
			return Open(ctx, js, opts)
		}
		if err != nil {
			return nil, fmt.Errorf("open changelog: create stream %s: %w", name, err)
		}
	case err != nil:
		return nil, fmt.Errorf("open changelog: stream %s: %w", name, err)
	default:
		have := stream.CachedInfo().Config
		if !settingsMatch(have, want) {
			if have.Storage != want.Storage {
				return nil, fmt.Errorf("open changelog: stream %s has %s storage, want %s: storage cannot change; move the data to a new stream or keep the old setting", name, have.Storage, want.Storage)
			}
			upd := have
			upd.Subjects, upd.Replicas = want.Subjects, want.Replicas
			upd.AllowDirect, upd.AllowAtomicPublish = true, true
			upd.MaxConsumers = MaxConsumers
			upd.MaxMsgs, upd.MaxBytes, upd.MaxAge = -1, -1, 0
			upd.MaxMsgsPerSubject, upd.MaxMsgSize = -1, -1
			if stream, err = js.UpdateStream(ctx, upd); err != nil {
				return nil, fmt.Errorf("open changelog: update stream %s: %w", name, err)
			}
		}
	}
	return &Log{js: js, stream: stream, group: opts.Group, ackPrefix: []byte(`{"stream":"` + name + `","seq":`)}, nil
}

// MaxConsumers bounds the consumers of a changelog stream: each learner's
// and standby's tailer and each restore holds one, so a group of 10,000
// tasks with a standby each holds 10,000. It is set explicitly because
// nats-server (2.12 and later) gives a stream that sets no bound (or -1) a
// default of 1,000 consumers.
const MaxConsumers = 1_000_000

// settingsMatch tells whether an existing stream has the settings the
// changelog relies on: what it keeps, who may read it how, and the fence.
func settingsMatch(have, want jetstream.StreamConfig) bool {
	unlimited := func(n int64) bool { return n <= 0 }
	return slices.Equal(have.Subjects, want.Subjects) &&
		have.Storage == want.Storage && have.Replicas == want.Replicas &&
		have.Retention == jetstream.LimitsPolicy &&
		have.AllowDirect && have.AllowAtomicPublish && have.MaxConsumers == MaxConsumers &&
		unlimited(have.MaxMsgs) && unlimited(have.MaxBytes) && have.MaxAge == 0 &&
		unlimited(have.MaxMsgsPerSubject) && have.MaxMsgSize <= 0
}

// Stream returns the changelog's stream.
func (l *Log) Stream() jetstream.Stream { return l.stream }

// Group returns the group the changelog belongs to.
func (l *Log) Group() string { return l.group }

// Subject returns the subject of task's changelog.
func (l *Log) Subject(task string) string { return Subject(l.group, task) }

// headerOverhead is what the fence header adds to a message: the NATS/1.0
// status line, the header line with a 20-digit sequence, and the blank line.
var headerOverhead = len("NATS/1.0\r\n" + jetstream.ExpectedLastSubjSeqHeader + ": 18446744073709551615\r\n\r\n")

// Append appends e to task's changelog, on condition that the subject's last
// message is at stream sequence expectedLast (0: the subject is empty), and
// returns the stream sequence e was stored at. When another writer has
// appended since, the error wraps ErrFenced and is a *FencedError; nothing
// is appended. An entry that does not fit in one message returns an error
// wrapping ErrTooLarge before anything is sent.
//
// If ctx ends or the connection fails after the server stored the message
// but before its acknowledgement arrived, Append returns an error although
// the entry is appended; a retry with the same expectedLast is then fenced
// with Actual at the entry's sequence.
func (l *Log) Append(ctx context.Context, task string, expectedLast uint64, e Entry) (uint64, error) {
	if !ValidTask(task) {
		return 0, fmt.Errorf("append to task %q: invalid task ID", task)
	}
	switch {
	case e.Kind != KindCommit && e.Kind != KindEpoch && e.Kind != KindRelease:
		return 0, fmt.Errorf("append to task %q: invalid entry kind %d", task, e.Kind)
	case e.Kind == KindRelease && (e.Successor == "" || len(e.Successor) > maxSuccessor):
		return 0, fmt.Errorf("append to task %q: a release entry names a successor of 1 to %d bytes, not %q", task, maxSuccessor, e.Successor)
	case e.Kind == KindRelease && (len(e.Checkpoint) > 0 || len(e.Puts) > 0 || len(e.Deletes) > 0):
		return 0, fmt.Errorf("append to task %q: a release entry carries no checkpoint or mutations", task)
	}
	buf := encodeBufs.Get().(*[]byte)
	data := Encode((*buf)[:0], e)
	defer func() {
		// The connection copied the message into its own buffer.
		if cap(data) <= maxPooledEncoding {
			*buf = data[:0]
			encodeBufs.Put(buf)
		}
	}()
	if limit := l.js.Conn().MaxPayload(); int64(len(data)+headerOverhead) > limit {
		return 0, fmt.Errorf("append %d bytes to task %q, max payload %d: %w", len(data), task, limit, ErrTooLarge)
	}
	msg := &nats.Msg{
		Subject: l.Subject(task),
		Data:    data,
		Header:  nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{strconv.FormatUint(expectedLast, 10)}},
	}
	seq, err := l.publish(ctx, msg)
	if err != nil {
		if apiErr, ok := fence.WrongLastSequence(err); ok {
			return 0, &FencedError{Task: task, Expected: expectedLast, Actual: actualFromDescription(apiErr.Description)}
		}
		return 0, fmt.Errorf("append to task %q after seq %d: %w", task, expectedLast, err)
	}
	return seq, nil
}

// encodeBufs holds the buffers Append encodes entries into, up to
// maxPooledEncoding bytes each: a commit of a hundred records needs 12 KB.
var encodeBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledEncoding = 256 << 10

// publish sends msg to the stream and returns the sequence it was stored
// at, as jetstream.JetStream.PublishMsg does without options: bounded by
// the JetStream context's default timeout when ctx has no deadline, and
// tried again twice, a quarter second apart, while no stream answers (a
// blip in the stream's leadership). The stream's acknowledgement is read
// without a JSON decoder when it is the plain one (parseAck); an error
// comes back as PublishMsg's does, a *jetstream.APIError.
func (l *Log) publish(ctx context.Context, msg *nats.Msg) (uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.js.Options().DefaultTimeout)
		defer cancel()
	}
	nc := l.js.Conn()
	resp, err := nc.RequestMsgWithContext(ctx, msg)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < jetstream.DefaultPubRetryAttempts; r++ {
		t := time.NewTimer(jetstream.DefaultPubRetryWait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		resp, err = nc.RequestMsgWithContext(ctx, msg)
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return 0, jetstream.ErrNoStreamResponse
	case err != nil:
		return 0, err
	}
	if seq, ok := l.parseAck(resp.Data); ok {
		return seq, nil
	}
	var ack struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, jetstream.ErrInvalidJSAck
	}
	if ack.Error != nil {
		return 0, fmt.Errorf("nats: %w", ack.Error)
	}
	if ack.Stream == "" {
		return 0, jetstream.ErrInvalidJSAck
	}
	return ack.Seq, nil
}

// parseAck reads the sequence from the stream's plain acknowledgement of a
// stored message, {"stream":"<name>","seq":N} (which may go on with more
// fields), and reports whether data was one.
func (l *Log) parseAck(data []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(data, l.ackPrefix)
	if !ok {
		return 0, false
	}
	var seq uint64
	i := 0
	for ; i < len(rest) && i < 20 && rest[i] >= '0' && rest[i] <= '9'; i++ {
		seq = seq*10 + uint64(rest[i]-'0')
	}
	if i == 0 || i >= 20 || i == len(rest) || (rest[i] != '}' && rest[i] != ',') || seq == 0 {
		return 0, false
	}
	return seq, true
}

// actualFromDescription reads N from the server's "wrong last sequence: N".
func actualFromDescription(desc string) uint64 {
	i := strings.LastIndexByte(desc, ':')
	if i < 0 {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(desc[i+1:]), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Last returns the stream sequence of the last message on task's subject, or
// 0 when the subject is empty.
func (l *Log) Last(ctx context.Context, task string) (uint64, error) {
	msg, err := l.stream.GetLastMsgForSubject(ctx, l.Subject(task))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("last sequence of task %q: %w", task, err)
	}
	return msg.Sequence, nil
}

// After returns the first message on task's subject after sequence seq,
// decoded; ok is false when there is none. An owner whose append's
// acknowledgement was lost reads what follows its last sequence to learn
// whether the append landed.
func (l *Log) After(ctx context.Context, task string, seq uint64) (rec Record, ok bool, err error) {
	msg, err := l.stream.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(l.Subject(task)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("message of task %q after seq %d: %w", task, seq, err)
	}
	e, err := Decode(msg.Data)
	if err != nil {
		return Record{}, false, fmt.Errorf("message of task %q at seq %d: %w", task, msg.Sequence, err)
	}
	return Record{Seq: msg.Sequence, Entry: e}, true, nil
}

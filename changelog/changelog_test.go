package changelog_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/natstest"
	"github.com/handoffhq/handoff/statestore"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openLog(t *testing.T, js jetstream.JetStream, group string) *changelog.Log {
	t.Helper()
	l, err := changelog.Open(testContext(t), js, changelog.Options{Group: group})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func TestNames(t *testing.T) {
	for name, want := range map[string]bool{
		"g": true, "orders_v2-EU": true, string(bytes.Repeat([]byte("a"), 64)): true,
		"": false, string(bytes.Repeat([]byte("a"), 65)): false, "a.b": false, "a b": false, "a*": false, "é": false,
	} {
		if got := changelog.ValidGroup(name); got != want {
			t.Errorf("ValidGroup(%q) = %v, want %v", name, got, want)
		}
	}
	for id, want := range map[string]bool{
		"orders-7": true, "t:1/2": true, "": false, "a.b": false, "a>": false, "*": false, "a b": false, "a\tb": false,
	} {
		if got := changelog.ValidTask(id); got != want {
			t.Errorf("ValidTask(%q) = %v, want %v", id, got, want)
		}
	}
	if got := changelog.StreamName("g1"); got != "HANDOFF_g1" {
		t.Errorf("StreamName(g1) = %q", got)
	}
	if got := changelog.Subject("g1", "t-1"); got != "handoff.g1.log.t-1" {
		t.Errorf("Subject(g1, t-1) = %q", got)
	}
}

func TestOpen(t *testing.T) {
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := testContext(t)

	if _, err := changelog.Open(ctx, js, changelog.Options{Group: "bad.group"}); err == nil {
		t.Error("Open with an invalid group = nil error")
	}
	l := openLog(t, js, "g")
	cfg := l.Stream().CachedInfo().Config
	if cfg.Name != "HANDOFF_g" || len(cfg.Subjects) != 1 || cfg.Subjects[0] != "handoff.g.log.>" ||
		cfg.Storage != jetstream.FileStorage || cfg.Replicas != 1 || !cfg.AllowDirect || !cfg.AllowAtomicPublish ||
		cfg.MaxMsgs != -1 || cfg.MaxBytes != -1 || cfg.MaxAge != 0 {
		t.Fatalf("stream config = %+v", cfg)
	}
	if l.Group() != "g" || l.Subject("t") != "handoff.g.log.t" {
		t.Errorf("Group, Subject = %q, %q", l.Group(), l.Subject("t"))
	}
	seq, err := l.Append(ctx, "t", 0, changelog.Entry{Kind: changelog.KindEpoch, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}

	// A second Open is a no-op: same stream, data kept, no update. The
	// server's stream advisories tell: they come in order, so counting the
	// updates before a marker stream's creation counts them all.
	nc := srv.Conn(t)
	adv, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.STREAM.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	before, _ := l.Stream().Info(ctx)
	l2 := openLog(t, js, "g")
	after, err := l2.Stream().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !after.Created.Equal(before.Created) || after.State.Msgs != 1 || after.TimeStamp.IsZero() {
		t.Errorf("second Open changed the stream: before %+v, after %+v", before.State, after.State)
	}
	if last, err := l2.Last(ctx, "t"); err != nil || last != seq {
		t.Errorf("Last after reopen = %d, %v, want %d", last, err, seq)
	}

	// A stream whose settings drifted is repaired, keeping its data.
	drifted := after.Config
	drifted.MaxMsgs, drifted.AllowDirect = 1000, false
	if _, err := js.UpdateStream(ctx, drifted); err != nil {
		t.Fatal(err)
	}
	l3 := openLog(t, js, "g")
	cfg = l3.Stream().CachedInfo().Config
	if cfg.MaxMsgs != -1 || !cfg.AllowDirect {
		t.Errorf("Open did not repair the stream: %+v", cfg)
	}
	if last, err := l3.Last(ctx, "t"); err != nil || last != seq {
		t.Errorf("Last after repair = %d, %v, want %d", last, err, seq)
	}

	// Exactly two updates happened: the drift and the repair.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MARKER", Subjects: []string{"marker"}}); err != nil {
		t.Fatal(err)
	}
	updates := 0
	for {
		msg, err := adv.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting for the marker stream's advisory: %v", err)
		}
		if strings.HasPrefix(msg.Subject, "$JS.EVENT.ADVISORY.STREAM.CREATED.MARKER") {
			break
		}
		if strings.HasPrefix(msg.Subject, "$JS.EVENT.ADVISORY.STREAM.UPDATED.HANDOFF_g") {
			updates++
		}
	}
	if updates != 2 {
		t.Errorf("the stream was updated %d times, want 2 (drift and repair; a plain reopen must not update)", updates)
	}

	// Storage cannot change: a clear error.
	if _, err := changelog.Open(ctx, js, changelog.Options{Group: "g", Storage: jetstream.MemoryStorage}); err == nil {
		t.Error("Open with another storage = nil error")
	}
}

func TestAppendLast(t *testing.T) {
	srv := natstest.Start(t)
	l := openLog(t, srv.JetStream(t), "g")
	ctx := testContext(t)

	if last, err := l.Last(ctx, "a"); err != nil || last != 0 {
		t.Fatalf("Last of an empty subject = %d, %v, want 0", last, err)
	}
	lastA, lastB := uint64(0), uint64(0)
	for i := range 5 {
		e := changelog.Entry{Kind: changelog.KindCommit, Epoch: 1, Puts: []statestore.KV{{Key: []byte("k"), Value: []byte{byte(i)}}}}
		seqA, err := l.Append(ctx, "a", lastA, e)
		if err != nil {
			t.Fatalf("Append(a, %d): %v", lastA, err)
		}
		seqB, err := l.Append(ctx, "b", lastB, e)
		if err != nil {
			t.Fatalf("Append(b, %d): %v", lastB, err)
		}
		if seqA <= lastA || seqB != seqA+1 {
			t.Fatalf("appends at %d and %d after %d and %d", seqA, seqB, lastA, lastB)
		}
		lastA, lastB = seqA, seqB
	}
	for task, want := range map[string]uint64{"a": lastA, "b": lastB} {
		if got, err := l.Last(ctx, task); err != nil || got != want {
			t.Errorf("Last(%s) = %d, %v, want %d", task, got, err, want)
		}
	}
	// The stored message decodes to what was appended.
	msg, err := l.Stream().GetMsg(ctx, lastA)
	if err != nil {
		t.Fatal(err)
	}
	e, err := changelog.Decode(msg.Data)
	if err != nil || e.Kind != changelog.KindCommit || len(e.Puts) != 1 || e.Puts[0].Value[0] != 4 {
		t.Errorf("Decode(stored) = %+v, %v", e, err)
	}
	if msg.Subject != "handoff.g.log.a" {
		t.Errorf("stored on %q", msg.Subject)
	}

	if _, err := l.Append(ctx, "bad.task", 0, changelog.Entry{Kind: changelog.KindCommit}); err == nil {
		t.Error("Append to an invalid task = nil error")
	}
	if _, err := l.Append(ctx, "a", lastA, changelog.Entry{}); err == nil {
		t.Error("Append of an entry without a kind = nil error")
	}
}

func TestAppendTooLarge(t *testing.T) {
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	l := openLog(t, js, "g")
	ctx := testContext(t)
	max := int(js.Conn().MaxPayload())
	big := changelog.Entry{Kind: changelog.KindCommit, Puts: []statestore.KV{{Key: []byte("k"), Value: make([]byte, max)}}}
	if _, err := l.Append(ctx, "t", 0, big); !errors.Is(err, changelog.ErrTooLarge) {
		t.Fatalf("Append of %d bytes err = %v, want ErrTooLarge", max, err)
	}
	if last, _ := l.Last(ctx, "t"); last != 0 {
		t.Fatalf("a too large entry was appended at %d", last)
	}
	// Just under the limit goes through.
	fits := changelog.Entry{Kind: changelog.KindCommit, Puts: []statestore.KV{{Key: []byte("k"), Value: make([]byte, max-200)}}}
	if _, err := l.Append(ctx, "t", 0, fits); err != nil {
		t.Fatalf("Append of %d bytes: %v", max-200, err)
	}
}

// writer is a task's owner as the agent's commit path runs it: a fenced
// append, then the apply to its own store at the appended sequence.
type writer struct {
	log   *changelog.Log
	store *statestore.Store
	last  uint64 // last sequence this writer appended or applied
	epoch uint64
}

func (w *writer) commit(ctx context.Context, task string, puts ...statestore.KV) error {
	e := changelog.Entry{Kind: changelog.KindCommit, Epoch: w.epoch, Puts: puts}
	seq, err := w.log.Append(ctx, task, w.last, e)
	if err != nil {
		return err
	}
	if err := w.store.Apply(task, statestore.Commit{Seq: seq, Epoch: e.Epoch, Checkpoint: e.Checkpoint, Puts: e.Puts, Deletes: e.Deletes}); err != nil {
		return err
	}
	w.last = seq
	return nil
}

func TestFencing(t *testing.T) {
	srv := natstest.Start(t)
	l := openLog(t, srv.JetStream(t), "g")
	ctx := testContext(t)
	newStore := func() *statestore.Store {
		s, err := statestore.Open("db", statestore.Options{FS: vfs.NewMem(), Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	kv := func(k, v string) statestore.KV { return statestore.KV{Key: []byte(k), Value: []byte(v)} }

	a := &writer{log: l, store: newStore(), epoch: 1}
	if err := a.commit(ctx, "t", kv("x", "a1")); err != nil {
		t.Fatal(err)
	}
	// B takes over: it has caught up to A's last commit and appends an
	// epoch marker fenced on it.
	b := &writer{log: l, store: newStore(), epoch: 2, last: a.last}
	marker, err := l.Append(ctx, "t", b.last, changelog.Entry{Kind: changelog.KindEpoch, Epoch: 2})
	if err != nil {
		t.Fatal(err)
	}
	b.last = marker
	if err := b.commit(ctx, "t", kv("x", "b1")); err != nil {
		t.Fatal(err)
	}

	// A, stale, tries again.
	staleLast := a.last
	err = a.commit(ctx, "t", kv("x", "a2"), kv("only-a", "1"))
	if !errors.Is(err, changelog.ErrFenced) {
		t.Fatalf("stale commit err = %v, want ErrFenced", err)
	}
	var fe *changelog.FencedError
	if !errors.As(err, &fe) {
		t.Fatalf("stale commit err = %T, want a *FencedError", err)
	}
	if fe.Task != "t" || fe.Expected != staleLast || fe.Actual != b.last {
		t.Errorf("FencedError = %+v, want task t, expected %d, actual %d", fe, staleLast, b.last)
	}
	// A's mutation is neither in the changelog nor in A's store.
	if last, _ := l.Last(ctx, "t"); last != b.last {
		t.Errorf("Last = %d, want B's %d", last, b.last)
	}
	cons, err := l.Stream().OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{l.Subject("t")}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(100)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for msg := range batch.Messages() {
		n++
		e, err := changelog.Decode(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range e.Puts {
			if string(p.Value) == "a2" || string(p.Key) == "only-a" {
				t.Errorf("the fenced commit is in the changelog: %+v", e)
			}
		}
	}
	if n != 3 {
		t.Errorf("changelog holds %d messages, want 3", n)
	}
	if v, err := a.store.Get("t", []byte("x")); err != nil || string(v) != "a1" {
		t.Errorf("A's store has x = %q, %v, want a1", v, err)
	}
	if _, err := a.store.Get("t", []byte("only-a")); !errors.Is(err, statestore.ErrNotFound) {
		t.Errorf("the fenced mutation reached A's store: %v", err)
	}
	// A subject that must be empty fences too.
	if _, err := l.Append(ctx, "t", 0, changelog.Entry{Kind: changelog.KindEpoch}); !errors.Is(err, changelog.ErrFenced) {
		t.Errorf("Append expecting an empty subject err = %v, want ErrFenced", err)
	}
}

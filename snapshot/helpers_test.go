package snapshot_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/natstest"
	"github.com/handoffhq/handoff/snapshot"
	"github.com/handoffhq/handoff/statestore"
)

type env struct {
	srv    *natstest.Server
	js     jetstream.JetStream
	log    *changelog.Log
	bucket *snapshot.Bucket
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := testContext(t)
	l, err := changelog.Open(ctx, js, changelog.Options{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := snapshot.Open(ctx, js, snapshot.Options{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, js: js, log: l, bucket: b}
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func memStore(t testing.TB) *statestore.Store {
	t.Helper()
	s, err := statestore.Open("db", statestore.Options{FS: vfs.NewMem(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// writer commits like the agent: fenced append, then apply to its store.
type writer struct {
	log   *changelog.Log
	store *statestore.Store
	task  string
	last  uint64
}

func (w *writer) commit(t testing.TB, e changelog.Entry) uint64 {
	t.Helper()
	seq, err := w.log.Append(context.Background(), w.task, w.last, e)
	if err != nil {
		t.Fatalf("Append(%s after %d): %v", w.task, w.last, err)
	}
	if err := w.store.Apply(w.task, statestore.Commit{Seq: seq, Epoch: e.Epoch, Checkpoint: e.Checkpoint, Puts: e.Puts, Deletes: e.Deletes}); err != nil {
		t.Fatalf("Apply(%s, %d): %v", w.task, seq, err)
	}
	w.last = seq
	return seq
}

// put is commit i of a simple history: keys k0..k(n-1), overwritten in turn.
func put(i, n int) changelog.Entry {
	return changelog.Entry{Kind: changelog.KindCommit, Epoch: 1, Checkpoint: fmt.Appendf(nil, "cp%d", i),
		Puts: []statestore.KV{{Key: fmt.Appendf(nil, "k%04d", i%n), Value: fmt.Appendf(nil, "v%d", i)}}}
}

// allKVs returns every key and value of task in s.
func allKVs(t testing.TB, s *statestore.Store, task string) []statestore.KV {
	t.Helper()
	var out []statestore.KV
	var start []byte
	for {
		kvs, err := s.Scan(task, statestore.ScanOptions{Start: start, Limit: statestore.MaxScanLimit})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, kvs...)
		if len(kvs) < statestore.MaxScanLimit {
			return out
		}
		start = append(bytes.Clone(kvs[len(kvs)-1].Key), 0)
	}
}

// subjectSeqs returns the stream sequences of the messages on task's
// subject, in order.
func subjectSeqs(t testing.TB, l *changelog.Log, task string) []uint64 {
	t.Helper()
	ctx := testContext(t)
	var out []uint64
	for seq := uint64(1); ; {
		m, err := l.Stream().GetMsg(ctx, seq, jetstream.WithGetMsgSubject(l.Subject(task)))
		if err != nil {
			if strings.Contains(err.Error(), "not found") {
				return out
			}
			t.Fatal(err)
		}
		out = append(out, m.Sequence)
		seq = m.Sequence + 1
	}
}

// bucketSubjects counts the object store's metadata and chunk subjects.
func bucketSubjects(t testing.TB, e *env) (metas, chunks int) {
	t.Helper()
	s, err := e.js.Stream(testContext(t), "OBJ_"+e.bucket.Name())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(testContext(t), jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	for subj := range info.State.Subjects {
		switch {
		case strings.Contains(subj, ".M."):
			metas++
		case strings.Contains(subj, ".C."):
			chunks++
		}
	}
	return metas, chunks
}

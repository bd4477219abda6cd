package restore_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/natstest"
	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/statestore"
)

type env struct {
	srv *natstest.Server
	js  jetstream.JetStream
	log *changelog.Log
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	l, err := changelog.Open(context.Background(), js, changelog.Options{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, js: js, log: l}
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

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// writer commits like the agent's commit path: fenced append, then apply to
// its own store at the appended sequence.
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
	if err := w.store.Apply(w.task, restore.Commit(e, seq)); err != nil {
		t.Fatalf("Apply(%s, %d): %v", w.task, seq, err)
	}
	w.last = seq
	return seq
}

func kv(k, v string) statestore.KV { return statestore.KV{Key: []byte(k), Value: []byte(v)} }

// entry i of a simple history: a put of k<i%7>, a delete of k<(i+3)%7>
// every third, a checkpoint every other.
func entry(i int) changelog.Entry {
	e := changelog.Entry{Kind: changelog.KindCommit, Epoch: 1, Puts: []statestore.KV{kv(fmt.Sprintf("k%d", i%7), fmt.Sprintf("v%d", i))}}
	if i%3 == 0 {
		e.Deletes = [][]byte{fmt.Appendf(nil, "k%d", (i+3)%7)}
	}
	if i%2 == 0 {
		e.Checkpoint = fmt.Appendf(nil, "cp%d", i)
	}
	return e
}

type state struct {
	meta statestore.Meta
	ok   bool
	data []statestore.KV
}

func stateOf(t testing.TB, s *statestore.Store, task string) state {
	t.Helper()
	m, ok, err := s.Meta(task)
	if err != nil {
		t.Fatal(err)
	}
	st := state{meta: m, ok: ok}
	var start []byte
	for {
		kvs, err := s.Scan(task, statestore.ScanOptions{Start: start, Limit: statestore.MaxScanLimit})
		if err != nil {
			t.Fatal(err)
		}
		st.data = append(st.data, kvs...)
		if len(kvs) < statestore.MaxScanLimit {
			return st
		}
		start = append(bytes.Clone(kvs[len(kvs)-1].Key), 0)
	}
}

func equalState(a, b state) bool {
	if a.ok != b.ok || a.meta.Applied != b.meta.Applied || a.meta.Epoch != b.meta.Epoch ||
		!bytes.Equal(a.meta.Checkpoint, b.meta.Checkpoint) || len(a.data) != len(b.data) {
		return false
	}
	return len(a.data) == 0 || reflect.DeepEqual(a.data, b.data)
}

func requireSameState(t testing.TB, got, want *statestore.Store, task string) {
	t.Helper()
	g, w := stateOf(t, got, task), stateOf(t, want, task)
	if !equalState(g, w) {
		t.Fatalf("restored state of %s:\n meta %+v, %d keys\nwant\n meta %+v, %d keys", task, g.meta, len(g.data), w.meta, len(w.data))
	}
}

// ran is how a Run ended.
type ran struct {
	res restore.Result
	err error
}

// runReplayer runs a Replayer in a goroutine; the returned channel yields
// how its Run ended.
func runReplayer(ctx context.Context, r *restore.Replayer) <-chan ran {
	done := make(chan ran, 1)
	go func() {
		res, err := r.Run(ctx)
		done <- ran{res, err}
	}()
	return done
}

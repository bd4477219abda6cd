package restore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/statestore"
)

func TestRestoreToEnd(t *testing.T) {
	e := newEnv(t)
	a := &writer{log: e.log, store: memStore(t), task: "t"}
	other := &writer{log: e.log, store: memStore(t), task: "other"}
	const n = 60
	var records, bytes uint64
	for i := range n {
		en := entry(i)
		if i == 30 {
			en = changelog.Entry{Kind: changelog.KindEpoch, Epoch: 2}
		}
		a.commit(t, en)
		other.commit(t, entry(i+1)) // interleaved: other tasks' messages are not this task's
		records += uint64(len(en.Puts) + len(en.Deletes))
		bytes += uint64(changelog.EncodedLen(en))
	}

	b := memStore(t)
	var reports []restore.Progress
	r := restore.New(e.log, b, restore.Options{Task: "t", MaxBatchBytes: 200, Logger: zerolog.Nop(),
		OnProgress: func(p restore.Progress) { reports = append(reports, p) }})
	res, err := r.Run(testContext(t))
	if err != nil || res.Ending != restore.CaughtUp {
		t.Fatalf("Run = %v, %v; want %v", res.Ending, err, restore.CaughtUp)
	}
	requireSameState(t, b, a.store, "t")
	if _, ok, _ := b.Meta("other"); ok {
		t.Error("restoring t wrote task other")
	}

	p := r.Progress()
	want := restore.Progress{Task: "t", Applied: a.last, End: a.last, Records: records, Replayed: n, ReplayedBytes: bytes, CaughtUp: true}
	if p.Task != want.Task || p.Applied != want.Applied || p.End != want.End || p.LagMsgs != 0 || p.LagBytes != 0 ||
		p.Records != want.Records || p.Replayed != want.Replayed || p.ReplayedBytes != want.ReplayedBytes || !p.CaughtUp || p.ETA != 0 || p.Started.IsZero() {
		t.Errorf("Progress() = %+v, want %+v", p, want)
	}
	if len(reports) < 2 || reports[0].Replayed != 0 || reports[len(reports)-1] != p {
		t.Fatalf("OnProgress got %d reports, first %+v; want a first one before replaying and the final one last", len(reports), reports)
	}
	// Lag is exact: what was replayed plus what is left is the whole history.
	for _, rp := range reports {
		if rp.Replayed+rp.LagMsgs != n {
			t.Errorf("report %+v: Replayed+LagMsgs = %d, want %d", rp, rp.Replayed+rp.LagMsgs, n)
		}
	}

	// A second run has nothing to do and returns at once.
	r2 := restore.New(e.log, b, restore.Options{Task: "t"})
	if _, err := r2.Run(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if p := r2.Progress(); p.Replayed != 0 || !p.CaughtUp || p.Applied != a.last {
		t.Errorf("second run's progress = %+v", p)
	}
	if _, err := r2.Run(testContext(t)); err == nil {
		t.Error("Run called twice = nil error")
	}
	// A task without a changelog restores to nothing.
	r3 := restore.New(e.log, b, restore.Options{Task: "empty"})
	if _, err := r3.Run(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.Meta("empty"); ok {
		t.Error("restoring an empty changelog created the task")
	}
}

func TestInterruptedRestoreResumes(t *testing.T) {
	e := newEnv(t)
	a := &writer{log: e.log, store: memStore(t), task: "t"}
	const n, stopAt = 120, 40
	for i := range n {
		a.commit(t, entry(i))
	}
	b := memStore(t)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	r := restore.New(e.log, b, restore.Options{Task: "t", MaxBatchBytes: 1, ProgressInterval: time.Nanosecond,
		OnProgress: func(p restore.Progress) {
			if p.Replayed >= stopAt {
				cancel()
			}
		}})
	_, err := r.Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Run = %v, want context.Canceled", err)
	}
	first := r.Progress()
	if first.Replayed != stopAt || first.LagMsgs != n-stopAt || first.CaughtUp {
		t.Fatalf("progress at interruption = %+v, want %d replayed, %d to go", first, stopAt, n-stopAt)
	}
	if m, _, _ := b.Meta("t"); m.Applied != first.Applied {
		t.Fatalf("store applied %d, progress says %d", m.Applied, first.Applied)
	}

	r2 := restore.New(e.log, b, restore.Options{Task: "t"})
	if _, err := r2.Run(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if p := r2.Progress(); p.Replayed != n-stopAt {
		t.Errorf("resumed run replayed %d, want %d (from seq %d)", p.Replayed, n-stopAt, first.Applied)
	}
	requireSameState(t, b, a.store, "t")
}

func TestTailSeesNewCommits(t *testing.T) {
	e := newEnv(t)
	a := &writer{log: e.log, store: memStore(t), task: "t"}
	for i := range 5 {
		a.commit(t, entry(i))
	}
	b := memStore(t)
	var mu sync.Mutex
	var caughtUp int
	r := restore.New(e.log, b, restore.Options{Task: "t", Tail: true, OnProgress: func(p restore.Progress) {
		if p.CaughtUp {
			mu.Lock()
			caughtUp++
			mu.Unlock()
		}
	}})
	ctx, cancel := context.WithCancel(testContext(t))
	done := runReplayer(ctx, r)
	if err := r.WaitApplied(ctx, a.last); err != nil {
		t.Fatalf("WaitApplied(%d): %v", a.last, err)
	}
	for i := 5; i < 25; i++ {
		seq := a.commit(t, entry(i))
		if err := r.WaitApplied(ctx, seq); err != nil {
			t.Fatalf("WaitApplied(%d): %v", seq, err)
		}
		// The store is current once WaitApplied returns.
		want := entry(i).Puts[0]
		if v, err := b.Get("t", want.Key); err != nil || string(v) != string(want.Value) {
			t.Fatalf("after WaitApplied(%d), Get(%s) = %q, %v, want %q", seq, want.Key, v, err, want.Value)
		}
		if p := r.Progress(); !p.CaughtUp || p.Applied != seq || p.End != seq {
			t.Fatalf("progress after WaitApplied(%d) = %+v, want caught up at it", seq, p)
		}
	}
	cancel()
	if end := <-done; end.err != nil || end.res.Ending != restore.Cancelled {
		t.Fatalf("tailing Run after cancel = %v, %v; want nil, %v", end.res.Ending, end.err, restore.Cancelled)
	}
	requireSameState(t, b, a.store, "t")
	mu.Lock()
	defer mu.Unlock()
	if caughtUp == 0 {
		t.Error("OnProgress never reported caught up")
	}
}

func TestTailAcrossNATSRestart(t *testing.T) {
	e := newEnv(t)
	a := &writer{log: e.log, store: memStore(t), task: "t"}
	a.commit(t, entry(0))
	b := memStore(t)
	r := restore.New(e.log, b, restore.Options{Task: "t", Tail: true})
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	done := runReplayer(ctx, r)
	if err := r.WaitApplied(ctx, a.last); err != nil {
		t.Fatal(err)
	}
	e.srv.Restart(t)
	// The writer's connection reconnects on its own; retry until JetStream
	// answers again. Each try is bounded: one sent while the server was
	// still recovering may never be answered. A try can also land with its
	// acknowledgement lost; the retry is then fenced, and the entry it
	// finds after a.last is that try's (this test is the only writer).
	poll.Eventually(t, 30*time.Second, "an append after the restart", func() error {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		seq, err := e.log.Append(actx, "t", a.last, entry(1))
		acancel()
		if errors.Is(err, changelog.ErrFenced) {
			seq, err = e.log.Last(ctx, "t")
			if err == nil && seq <= a.last {
				return poll.Permanent(fmt.Errorf("Append after restart fenced, but the subject ends at %d", seq))
			}
		}
		if err != nil {
			return err
		}
		a.last = seq
		return nil
	})
	if err := a.store.Apply("t", restore.Commit(entry(1), a.last)); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitApplied(ctx, a.last); err != nil {
		t.Fatalf("WaitApplied after NATS restart: %v", err)
	}
	cancel()
	if end := <-done; end.err != nil {
		t.Fatal(end.err)
	}
	requireSameState(t, b, a.store, "t")
}

func TestCorruptMessage(t *testing.T) {
	valid := changelog.Encode(nil, entry(1))
	for name, tt := range map[string]struct {
		data []byte
		want error
	}{
		"garbage":   {[]byte("definitely not an entry"), changelog.ErrUnknownVersion},
		"truncated": {valid[:len(valid)-2], changelog.ErrCorrupt},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			a := &writer{log: e.log, store: memStore(t), task: "t"}
			for i := range 3 {
				a.commit(t, entry(i))
			}
			good := stateOf(t, a.store, "t")
			ack, err := e.js.Publish(testContext(t), e.log.Subject("t"), tt.data)
			if err != nil {
				t.Fatal(err)
			}
			a.last = ack.Sequence
			a.commit(t, entry(7)) // a valid message after the bad one

			b := memStore(t)
			r := restore.New(e.log, b, restore.Options{Task: "t"})
			_, err = r.Run(testContext(t))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Run = %v, want %v", err, tt.want)
			}
			if msg := err.Error(); !strings.Contains(msg, "task t") || !strings.Contains(msg, "seq "+strconv.FormatUint(ack.Sequence, 10)) {
				t.Errorf("error %q does not name the task and sequence %d", msg, ack.Sequence)
			}
			// The valid prefix is applied, nothing of or after the bad message.
			if got := stateOf(t, b, "t"); !equalState(got, good) {
				t.Errorf("after the corrupt message, state %+v, want %+v", got, good)
			}
			// WaitApplied reports Run's error.
			if err := r.WaitApplied(testContext(t), ack.Sequence); !errors.Is(err, tt.want) {
				t.Errorf("WaitApplied past the corrupt message = %v, want Run's error", err)
			}
		})
	}
}

func TestWaitApplied(t *testing.T) {
	e := newEnv(t)
	a := &writer{log: e.log, store: memStore(t), task: "t"}
	a.commit(t, entry(0))
	b := memStore(t)
	r := restore.New(e.log, b, restore.Options{Task: "t"})

	// Before Run: waits, and a context ends the wait.
	ctx, cancel := context.WithCancel(testContext(t))
	waited := make(chan error, 1)
	go func() { waited <- r.WaitApplied(ctx, a.last) }()
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitApplied with a cancelled context = %v", err)
	}
	// Woken by a running Run once it applies the sequence: a tailing Run
	// returns only when cancelled, after the wait, and the sequence is not
	// in the changelog when the wait starts.
	tail := restore.New(e.log, memStore(t), restore.Options{Task: "t", Tail: true})
	tctx, stopTail := context.WithCancel(testContext(t))
	tailed := make(chan error, 1)
	go func() {
		_, err := tail.Run(tctx)
		tailed <- err
	}()
	next := a.last + 1 // the stream holds only this task
	go func() { waited <- tail.WaitApplied(testContext(t), next) }()
	a.commit(t, entry(1))
	if a.last != next {
		t.Fatalf("appended at %d, want %d", a.last, next)
	}
	if err := <-waited; err != nil {
		t.Fatalf("WaitApplied woken by a tailing Run = %v", err)
	}
	if p := tail.Progress(); p.Applied < next {
		t.Errorf("WaitApplied returned with Progress at %d, want %d", p.Applied, next)
	}
	stopTail()
	if err := <-tailed; err != nil {
		t.Fatalf("tailing Run = %v", err)
	}
	if _, err := r.Run(testContext(t)); err != nil {
		t.Fatal(err)
	}
	// A sequence a finished Run never reached.
	if err := r.WaitApplied(testContext(t), a.last+10); !errors.Is(err, restore.ErrStopped) {
		t.Fatalf("WaitApplied beyond a finished Run = %v, want ErrStopped", err)
	}
	// A store that already has it answers at once, Run or not.
	r2 := restore.New(e.log, b, restore.Options{Task: "t"})
	if err := r2.WaitApplied(testContext(t), a.last); err != nil {
		t.Fatal(err)
	}
}

func TestBytesBoundedPull(t *testing.T) {
	// Large messages with a pull bound of a few of them restore without
	// stalling or tripping the slow-consumer limit. (Not larger: the
	// in-process server is slow with 1 MB messages under -race.)
	e := newEnv(t)
	a := &writer{log: e.log, store: memStore(t), task: "t"}
	maxPayload := int(e.js.Conn().MaxPayload())
	for i := range 6 {
		a.commit(t, changelog.Entry{Kind: changelog.KindCommit, Puts: []statestore.KV{{Key: []byte{byte(i)}, Value: make([]byte, maxPayload/4)}}})
	}
	b := memStore(t)
	r := restore.New(e.log, b, restore.Options{Task: "t", PullMaxBytes: maxPayload})
	if _, err := r.Run(testContext(t)); err != nil {
		t.Fatal(err)
	}
	requireSameState(t, b, a.store, "t")
	if rc := e.js.Conn().Stats().Reconnects; rc != 0 {
		t.Errorf("%d reconnects during the restore", rc)
	}
}

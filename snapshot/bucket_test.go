package snapshot_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/handoffhq/handoff/snapshot"
	"github.com/handoffhq/handoff/snapshot/local"
)

func TestTakeAndRead(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	w := &writer{log: e.log, store: memStore(t), task: "t"}
	for i := range 3000 {
		w.commit(t, put(i, 2500))
	}
	taken, err := local.Take(ctx, e.bucket, w.store, e.log, "t", snapshot.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	info := taken.Info
	if info.Task != "t" || info.Seq != w.last || info.Epoch != 1 || info.Keys != 2500 || info.Size == 0 || info.Created.IsZero() {
		t.Errorf("Take() = %+v, want task t at seq %d, epoch 1, 2500 keys", info, w.last)
	}
	if age := time.Since(info.Created); age < 0 || age > time.Minute {
		t.Errorf("Created %v is not about now", info.Created)
	}
	list, err := e.bucket.List(ctx, "t")
	if err != nil || len(list) != 1 || list[0].Name != info.Name || list[0].Size != info.Size {
		t.Fatalf("List(t) = %+v, %v; want the snapshot", list, err)
	}

	rd, err := e.bucket.Read(ctx, info)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	want := allKVs(t, w.store, "t")
	i := 0
	for rd.Next() {
		if i >= len(want) || !bytes.Equal(rd.Key(), want[i].Key) || !bytes.Equal(rd.Value(), want[i].Value) {
			t.Fatalf("record %d = %q=%q, want %v", i, rd.Key(), rd.Value(), want[i])
		}
		i++
	}
	if err := rd.Err(); err != nil || i != len(want) {
		t.Fatalf("read %d of %d records: %v", i, len(want), err)
	}
	if h := rd.Header(); string(h.Checkpoint) != "cp2999" {
		t.Errorf("checkpoint %q, want cp2999", h.Checkpoint)
	}

	// Nothing new: Take stores nothing.
	if _, err := local.Take(ctx, e.bucket, w.store, e.log, "t", snapshot.Retention{}); !errors.Is(err, local.ErrUpToDate) {
		t.Errorf("second Take = %v, want ErrUpToDate", err)
	}
	if _, err := local.Take(ctx, e.bucket, w.store, e.log, "none", snapshot.Retention{}); !errors.Is(err, local.ErrNoState) {
		t.Errorf("Take of a task without state = %v, want ErrNoState", err)
	}
}

// failingSource yields records, then fails after n of them.
type failingSource struct {
	n, i int
	err  error
	key  []byte
}

func (s *failingSource) Next() bool {
	if s.i >= s.n {
		return false
	}
	s.key = fmt.Appendf(s.key[:0], "key-%08d", s.i)
	s.i++
	return true
}
func (s *failingSource) Key() []byte   { return s.key }
func (s *failingSource) Value() []byte { return bytes.Repeat([]byte{'x'}, 200) }
func (s *failingSource) Err() error    { return s.err }

// TestFailedUploadKeepsPreviousSnapshot injects a failure in the middle of
// an upload: the previous snapshot stays the newest, nothing of the failed
// one is visible or left in the bucket, and the changelog is not trimmed.
func TestFailedUploadKeepsPreviousSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	w := &writer{log: e.log, store: memStore(t), task: "t"}
	for i := range 50 {
		w.commit(t, put(i, 10))
	}
	first, err := local.Take(ctx, e.bucket, w.store, e.log, "t", snapshot.Retention{Keep: 1, Margin: 5})
	if err != nil {
		t.Fatal(err)
	}
	seqsBefore := subjectSeqs(t, e.log, "t")
	for i := 50; i < 100; i++ {
		w.commit(t, put(i, 10))
	}

	boom := errors.New("injected failure")
	src := &failingSource{n: 5000, err: boom} // ~1 MB: several chunks go out first
	h := snapshot.Header{Task: "t", Seq: w.last, Epoch: 1, Keys: 10000}
	if _, err := e.bucket.PutSource(ctx, h, src); !errors.Is(err, boom) {
		t.Fatalf("PutSource with a failing source = %v, want the injected error", err)
	}
	list, err := e.bucket.List(ctx, "t")
	if err != nil || len(list) != 1 || list[0].Seq != first.Info.Seq {
		t.Fatalf("List after the failed upload = %+v, %v; want only the snapshot at %d", list, err, first.Info.Seq)
	}
	if metas, chunks := bucketSubjects(t, e); metas != 1 || chunks != 1 {
		t.Errorf("bucket holds %d metadata and %d chunk subjects, want 1 and 1 (the failed upload cleaned up)", metas, chunks)
	}
	if got := subjectSeqs(t, e.log, "t"); got[0] != seqsBefore[0] {
		t.Errorf("changelog starts at %d after the failed upload, want %d as before", got[0], seqsBefore[0])
	}
}

func TestDeleteLeavesNoTrace(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	w := &writer{log: e.log, store: memStore(t), task: "t"}
	var taken []local.Taken
	for round := range 4 {
		for i := range 20 {
			w.commit(t, put(round*20+i, 7))
		}
		tk, err := local.Take(ctx, e.bucket, w.store, e.log, "t", snapshot.Retention{Keep: 1, Margin: 3})
		if err != nil {
			t.Fatal(err)
		}
		if round > 0 && (len(tk.Trim.Deleted) != 1 || tk.Trim.Deleted[0].Seq != taken[round-1].Info.Seq) {
			t.Errorf("round %d deleted %+v, want the previous snapshot", round, tk.Trim.Deleted)
		}
		taken = append(taken, tk)
	}
	if metas, chunks := bucketSubjects(t, e); metas != 1 || chunks != 1 {
		t.Errorf("bucket holds %d metadata and %d chunk subjects, want 1 and 1: deletes leave no tombstones", metas, chunks)
	}
	if _, err := e.bucket.Read(ctx, taken[0].Info); !errors.Is(err, snapshot.ErrNotFound) {
		t.Errorf("Read of a deleted snapshot = %v, want ErrNotFound", err)
	}
}

func TestTrim(t *testing.T) {
	tests := []struct {
		name        string
		keep        int
		margin      uint64
		before      int // commits of t before the first snapshot
		between     int // commits between the first and second snapshot (0: one snapshot)
		after       int
		wantBelow   int // messages of t kept below the oldest kept snapshot
		wantSnaps   int
		wantOldestI int // index (0-based commit) of the oldest kept snapshot
	}{
		{name: "margin", keep: 1, margin: 10, before: 60, after: 15, wantBelow: 10, wantSnaps: 1, wantOldestI: 59},
		{name: "fewer messages than the margin", keep: 1, margin: 100, before: 60, after: 5, wantBelow: 59, wantSnaps: 1, wantOldestI: 59},
		{name: "keep two", keep: 2, margin: 3, before: 30, between: 30, after: 4, wantBelow: 3, wantSnaps: 2, wantOldestI: 29},
		{name: "keep one of two", keep: 1, margin: 3, before: 30, between: 30, after: 0, wantBelow: 3, wantSnaps: 1, wantOldestI: 59},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := testContext(t)
			w := &writer{log: e.log, store: memStore(t), task: "t"}
			other := &writer{log: e.log, store: memStore(t), task: "u"}
			var seqs []uint64
			commit := func(n int) {
				for range n {
					// Another task's messages interleave, so the stream's
					// sequences are not the subject's.
					other.commit(t, put(len(seqs), 3))
					seqs = append(seqs, w.commit(t, put(len(seqs), 9)))
				}
			}
			var purgedBelow uint64
			take := func() {
				tk, err := local.Take(ctx, e.bucket, w.store, e.log, "t", snapshot.Retention{Keep: tc.keep, Margin: tc.margin})
				if err != nil {
					t.Fatal(err)
				}
				purgedBelow = max(purgedBelow, tk.Trim.PurgedBelow)
			}
			commit(tc.before)
			take()
			if tc.between > 0 {
				commit(tc.between)
				take()
			}
			commit(tc.after)

			snaps, err := e.bucket.List(ctx, "t")
			if err != nil || len(snaps) != tc.wantSnaps {
				t.Fatalf("%d snapshots kept (%v), want %d", len(snaps), err, tc.wantSnaps)
			}
			oldest := seqs[tc.wantOldestI]
			if snaps[len(snaps)-1].Seq != oldest {
				t.Fatalf("oldest kept snapshot at %d, want %d", snaps[len(snaps)-1].Seq, oldest)
			}
			kept := subjectSeqs(t, e.log, "t")
			wantFirst := tc.wantOldestI - tc.wantBelow
			if len(kept) == 0 || kept[0] != seqs[wantFirst] || len(kept) != len(seqs)-wantFirst {
				t.Fatalf("subject keeps %d messages from %v, want %d from seq %d (commit %d)", len(kept), kept[:min(3, len(kept))], len(seqs)-wantFirst, seqs[wantFirst], wantFirst)
			}
			if wantFirst > 0 && purgedBelow != seqs[wantFirst] {
				t.Errorf("PurgedBelow = %d, want %d", purgedBelow, seqs[wantFirst])
			}
			if len(subjectSeqs(t, e.log, "u")) != len(seqs) {
				t.Error("the other task's changelog was trimmed")
			}
			// The subject's last message is kept: the fence still works.
			w.commit(t, put(0, 9))
		})
	}
}

// TestTrimNeverTakesTheLastMessage: a snapshot at the subject's last
// message with the least margin leaves that message, so the next fenced
// append goes through.
func TestTrimNeverTakesTheLastMessage(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	w := &writer{log: e.log, store: memStore(t), task: "t"}
	for i := range 5 {
		w.commit(t, put(i, 2))
	}
	if _, err := local.Take(ctx, e.bucket, w.store, e.log, "t", snapshot.Retention{Keep: 1, Margin: 1}); err != nil {
		t.Fatal(err)
	}
	if got := subjectSeqs(t, e.log, "t"); len(got) != 2 || got[1] != w.last {
		t.Fatalf("subject keeps %v, want the message before %d and %d itself", got, w.last, w.last)
	}
	last, err := e.log.Last(ctx, "t")
	if err != nil || last != w.last {
		t.Fatalf("Last = %d, %v; want %d", last, err, w.last)
	}
	w.commit(t, put(5, 2)) // fenced on w.last
}

func TestSweepRemovesOrphanChunks(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	w := &writer{log: e.log, store: memStore(t), task: "t"}
	w.commit(t, put(0, 1))
	if _, err := local.Take(ctx, e.bucket, w.store, e.log, "t", snapshot.Retention{}); err != nil {
		t.Fatal(err)
	}
	// What a killed upload leaves: chunks no metadata refers to.
	if _, err := e.js.Publish(ctx, "$O."+e.bucket.Name()+".C.orphan", []byte("partial")); err != nil {
		t.Fatal(err)
	}
	if n, err := e.bucket.Sweep(ctx, time.Hour); err != nil || n != 0 {
		t.Errorf("Sweep of young chunks = %d, %v; want 0: an upload may be in progress", n, err)
	}
	if n, err := e.bucket.Sweep(ctx, 0); err != nil || n != 1 {
		t.Errorf("Sweep = %d, %v; want 1", n, err)
	}
	if metas, chunks := bucketSubjects(t, e); metas != 1 || chunks != 1 {
		t.Errorf("after Sweep %d metadata and %d chunk subjects, want 1 and 1", metas, chunks)
	}
	if _, err := e.bucket.List(ctx, "t"); err != nil {
		t.Fatal(err)
	}
}

// TestListReturnsAcrossServerRestarts lists the bucket over and over while
// the server restarts: the object store lists through a watcher that waits
// for the bucket's end with no deadline of its own, and one whose server
// restarted never sees it. Every listing must come back by itself, long
// before the caller's context ends.
func TestListReturnsAcrossServerRestarts(t *testing.T) {
	defer snapshot.SetListTimeout(500 * time.Millisecond)()
	e := newEnv(t)
	ctx := testContext(t)
	const listers = 4
	var (
		mu       sync.Mutex
		calls    int
		stuck    int
		returned = make(chan struct{}, 1) // a listing came back
		stopped  = make(chan struct{})
		wg       sync.WaitGroup
	)
	for range listers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopped:
					return
				default:
				}
				_, _ = e.bucket.ListAll(ctx)
				mu.Lock()
				calls++
				if ctx.Err() != nil {
					stuck++
				}
				mu.Unlock()
				if ctx.Err() != nil {
					return
				}
				select {
				case returned <- struct{}{}:
				default:
				}
			}
		}()
	}
	for range 3 {
		// Restart once a listing has come back since the last restart.
		select {
		case <-returned:
		case <-ctx.Done():
		}
		select { // one that came back before the restart does not count
		case <-returned:
		default:
		}
		e.srv.Restart(t)
	}
	close(stopped)
	wg.Wait()
	if stuck > 0 || ctx.Err() != nil {
		t.Fatalf("%d of %d listings returned only when the caller's context ended", stuck, calls)
	}
	if _, err := e.bucket.ListAll(ctx); err != nil {
		t.Fatalf("ListAll after the restarts: %v", err)
	}
}

package restore_test

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
)

// TestTailTakesOverFromARelease: a tailer hands each release entry to
// OnRelease once everything before it is applied; taking over applies the
// entry and ends the tail.
func TestTailTakesOverFromARelease(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	src := &writer{log: e.log, store: memStore(t), task: "t1"}
	for i := range 5 {
		src.commit(t, entry(i))
	}
	dst := memStore(t)
	type seen struct {
		rel     restore.Release
		applied uint64 // the store's applied sequence when OnRelease ran
	}
	releases := make(chan seen, 4)
	progressAfter := make(chan restore.Progress, 64)
	var took bool
	r := restore.New(e.log, dst, restore.Options{
		Task: "t1", Tail: true, Logger: zerolog.Nop(),
		OnRelease: func(rel restore.Release) bool {
			m, _, _ := dst.Meta("t1")
			releases <- seen{rel, m.Applied}
			took = rel.Successor == "m2"
			return took
		},
		OnProgress: func(p restore.Progress) {
			if took {
				progressAfter <- p
			}
		},
	})
	done := runReplayer(ctx, r)
	if err := r.WaitApplied(ctx, src.last); err != nil {
		t.Fatal(err)
	}

	// A release naming another member is applied and the tail goes on.
	other := src.commit(t, changelog.Entry{Kind: changelog.KindRelease, Epoch: 2, Successor: "m3"})
	got := <-releases
	if got.rel.Seq != other || got.rel.Successor != "m3" || got.rel.Epoch != 2 || !got.rel.Last || got.applied != other-1 {
		t.Fatalf("OnRelease got %+v with the store at %d, want seq %d naming m3 at epoch 2, last, with the store at %d", got.rel, got.applied, other, other-1)
	}
	if err := r.WaitApplied(ctx, other); err != nil {
		t.Fatal(err)
	}

	// The owner at epoch 2 commits twice, then hands over to m2: the
	// callback sees both commits applied, and the tail ends.
	src.commit(t, changelog.Entry{Kind: changelog.KindCommit, Epoch: 2, Puts: []changelog.KV{kv("a", "1")}})
	last := src.commit(t, changelog.Entry{Kind: changelog.KindCommit, Epoch: 2, Puts: []changelog.KV{kv("a", "2")}})
	rel := src.commit(t, changelog.Entry{Kind: changelog.KindRelease, Epoch: 3, Successor: "m2"})
	got = <-releases
	if got.rel.Seq != rel || got.applied != last || got.rel.Stored.IsZero() || time.Since(got.rel.Stored) > time.Minute {
		t.Fatalf("OnRelease got %+v with the store at %d, want seq %d with the store at %d and the server's time", got.rel, got.applied, rel, last)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after the takeover = %v, want nil", err)
		}
	case <-ctx.Done():
		t.Fatal("Run kept tailing after OnRelease took the task over")
	}
	if m, _, _ := dst.Meta("t1"); m.Applied != rel || m.Epoch != 3 {
		t.Errorf("store meta after the takeover = %+v, want the release entry applied (seq %d, epoch 3)", m, rel)
	}
	if n := len(progressAfter); n > 0 {
		t.Errorf("OnProgress called %d times after the takeover, want none", n)
	}
	requireSameState(t, dst, src.store, "t1")
}

// TestReleaseNotLast: a release entry followed by more messages reaches
// OnRelease with Last false.
func TestReleaseNotLast(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	src := &writer{log: e.log, store: memStore(t), task: "t1"}
	src.commit(t, entry(0))
	rel := src.commit(t, changelog.Entry{Kind: changelog.KindRelease, Epoch: 2, Successor: "m2"})
	marker := src.commit(t, changelog.Entry{Kind: changelog.KindEpoch, Epoch: 3})
	var got []restore.Release
	r := restore.New(e.log, memStore(t), restore.Options{Task: "t1", Logger: zerolog.Nop(),
		OnRelease: func(rel restore.Release) bool { got = append(got, rel); return false }})
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Seq != rel || got[0].Last {
		t.Fatalf("OnRelease got %+v, want one call at seq %d with Last false (seq %d follows)", got, rel, marker)
	}
}

// TestTailersConsumerIsDroppedSoon: the consumer a tailer reads with is one
// the server drops soon after nobody pulls from it (changelog's
// ConsumerInactive), not after the client library's 5 minutes: a stream
// holds 1,000 consumers by default, and every stopped restore would keep
// one that long.
func TestTailersConsumerIsDroppedSoon(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	src := &writer{log: e.log, store: memStore(t), task: "t1"}
	src.commit(t, entry(0))
	r := restore.New(e.log, memStore(t), restore.Options{Task: "t1", Tail: true, Logger: zerolog.Nop()})
	runReplayer(ctx, r)
	if err := r.WaitApplied(ctx, src.last); err != nil {
		t.Fatal(err)
	}
	lister := e.log.Stream().ListConsumers(ctx)
	n := 0
	for info := range lister.Info() {
		n++
		if got := info.Config.InactiveThreshold; got != changelog.ConsumerInactive {
			t.Errorf("consumer %s: inactive threshold %v, want %v", info.Name, got, changelog.ConsumerInactive)
		}
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d consumers on the changelog while one tailer runs, want 1", n)
	}
}

// TestCatchUpEndsWithinItsBound: a catch-up with EndWithin ends once no
// more than that many messages remain, leaving them to the tail that
// follows it, and at once when the subject's lag starts within it.
func TestCatchUpEndsWithinItsBound(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	src := &writer{log: e.log, store: memStore(t), task: "t1"}
	var seqs []uint64
	for i := range 10 {
		seqs = append(seqs, src.commit(t, entry(i)))
	}
	dst := memStore(t)
	r := restore.New(e.log, dst, restore.Options{Task: "t1", Logger: zerolog.Nop()})
	r.EndWithin(3)
	if err := <-runReplayer(ctx, r); err != nil {
		t.Fatal(err)
	}
	if m, _, _ := dst.Meta("t1"); m.Applied != seqs[6] {
		t.Fatalf("catch-up within 3 of 10 messages ended at seq %d, want %d (3 left to the tail)", m.Applied, seqs[6])
	}
	if p := r.Progress(); p.LagMsgs != 3 || p.CaughtUp {
		t.Fatalf("its last progress %+v, want a lag of 3, not caught up", p)
	}

	// Started within its bound, it applies nothing.
	r = restore.New(e.log, dst, restore.Options{Task: "t1", Logger: zerolog.Nop()})
	r.EndWithin(3)
	if err := <-runReplayer(ctx, r); err != nil {
		t.Fatal(err)
	}
	if m, _, _ := dst.Meta("t1"); m.Applied != seqs[6] {
		t.Fatalf("a catch-up that started 3 behind with EndWithin 3 moved the store to seq %d", m.Applied)
	}
	if p := r.Progress(); p.LagMsgs != 3 {
		t.Fatalf("its progress %+v, want a lag of 3", p)
	}
}

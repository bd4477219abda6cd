package restore_test

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
)

// TestTailStopsAtAReleaseToItsMember: a tailer applies a release entry that
// names another member and tails on; one that names its own member ends
// Run with the entry, everything before it applied and the entry not, for
// the caller to decide on and apply.
func TestTailStopsAtAReleaseToItsMember(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	src := &writer{log: e.log, store: memStore(t), task: "t1"}
	for i := range 5 {
		src.commit(t, entry(i))
	}
	dst := memStore(t)
	reports := make(chan restore.Progress, 256)
	r := restore.New(e.log, dst, restore.Options{
		Task: "t1", Tail: true, Member: "m2", Logger: zerolog.Nop(),
		OnProgress: func(p restore.Progress) { reports <- p },
	})
	done := runReplayer(ctx, r)
	if err := r.WaitApplied(ctx, src.last); err != nil {
		t.Fatal(err)
	}

	// A release naming another member is applied and the tail goes on.
	other := src.commit(t, changelog.Entry{Kind: changelog.KindRelease, Epoch: 2, Successor: "m3"})
	if err := r.WaitApplied(ctx, other); err != nil {
		t.Fatal(err)
	}
	if m, _, _ := dst.Meta("t1"); m.Applied != other || m.Epoch != 2 {
		t.Fatalf("store meta after a release to m3 = %+v, want it applied (seq %d, epoch 2)", m, other)
	}
	select {
	case end := <-done:
		t.Fatalf("Run ended (%v, %v) at a release entry naming another member", end.res.Ending, end.err)
	default:
	}

	// The owner at epoch 2 commits twice, then hands over to m2: Run ends
	// with the entry, both commits applied.
	src.commit(t, changelog.Entry{Kind: changelog.KindCommit, Epoch: 2, Puts: []changelog.KV{kv("a", "1")}})
	last := src.commit(t, changelog.Entry{Kind: changelog.KindCommit, Epoch: 2, Puts: []changelog.KV{kv("a", "2")}})
	rel := src.commit(t, changelog.Entry{Kind: changelog.KindRelease, Epoch: 3, Successor: "m2"})
	var end ran
	select {
	case end = <-done:
	case <-ctx.Done():
		t.Fatal("Run kept tailing past a release entry naming its member")
	}
	got := end.res.Release
	if end.err != nil || end.res.Ending != restore.AtRelease {
		t.Fatalf("Run at the release entry = %v, %v; want %v", end.res.Ending, end.err, restore.AtRelease)
	}
	if got.Seq != rel || got.Successor != "m2" || got.Epoch != 3 || !got.Last || got.Stored.IsZero() || time.Since(got.Stored) > time.Minute || got.Received.IsZero() {
		t.Fatalf("Run stopped at %+v, want seq %d naming m2 at epoch 3, last, with the server's time and its delivery's", got, rel)
	}
	if m, _, _ := dst.Meta("t1"); m.Applied != last || m.Epoch != 2 {
		t.Fatalf("store meta at the stop = %+v, want everything before the entry applied (seq %d, epoch 2), not the entry", m, last)
	}
	close(reports)
	var final restore.Progress
	for p := range reports {
		final = p
	}
	if final.Applied != last {
		t.Errorf("the last progress reported = %+v, want it at seq %d", final, last)
	}

	// The caller applies the entry.
	if err := dst.Apply("t1", got.Commit()); err != nil {
		t.Fatal(err)
	}
	if m, _, _ := dst.Meta("t1"); m.Applied != rel || m.Epoch != 3 {
		t.Errorf("store meta after applying the entry = %+v, want seq %d, epoch 3", m, rel)
	}
	requireSameState(t, dst, src.store, "t1")
}

// TestReleaseNotLast: a release entry followed by more messages stops a
// Run to the end with Last false; without Member, Run applies it as it
// comes and reaches the end.
func TestReleaseNotLast(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	src := &writer{log: e.log, store: memStore(t), task: "t1"}
	first := src.commit(t, entry(0))
	rel := src.commit(t, changelog.Entry{Kind: changelog.KindRelease, Epoch: 2, Successor: "m2"})
	marker := src.commit(t, changelog.Entry{Kind: changelog.KindEpoch, Epoch: 3})
	dst := memStore(t)
	res, err := restore.New(e.log, dst, restore.Options{Task: "t1", Member: "m2", Logger: zerolog.Nop()}).Run(ctx)
	if err != nil || res.Ending != restore.AtRelease || res.Release.Seq != rel || res.Release.Last {
		t.Fatalf("Run = %v %+v, %v; want %v at seq %d with Last false (seq %d follows)", res.Ending, res.Release, err, restore.AtRelease, rel, marker)
	}
	if m, _, _ := dst.Meta("t1"); m.Applied != first {
		t.Fatalf("store at seq %d after the stop, want %d", m.Applied, first)
	}

	res, err = restore.New(e.log, dst, restore.Options{Task: "t1", Logger: zerolog.Nop()}).Run(ctx)
	if err != nil || res.Ending != restore.CaughtUp {
		t.Fatalf("Run without a member = %v, %v; want %v", res.Ending, err, restore.CaughtUp)
	}
	requireSameState(t, dst, src.store, "t1")
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
	if end := <-runReplayer(ctx, r); end.err != nil {
		t.Fatal(end.err)
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
	if end := <-runReplayer(ctx, r); end.err != nil {
		t.Fatal(end.err)
	}
	if m, _, _ := dst.Meta("t1"); m.Applied != seqs[6] {
		t.Fatalf("a catch-up that started 3 behind with EndWithin 3 moved the store to seq %d", m.Applied)
	}
	if p := r.Progress(); p.LagMsgs != 3 {
		t.Fatalf("its progress %+v, want a lag of 3", p)
	}
}

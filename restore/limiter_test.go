package restore_test

import (
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
)

// TestHeldLimiterServesTheHandoffFirst: while a Limiter is held, the
// catch-ups that share it apply nothing, while a tailer (which takes no
// slot) and an urgent catch-up are served: the tailer receives the release
// entry that names its member and applies what precedes it, the catch-up
// of the task being handed over finishes. Once the hold is released, the
// held catch-up finishes too.
func TestHeldLimiterServesTheHandoffFirst(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	big := &writer{log: e.log, store: memStore(t), task: "big"}
	for i := range 200 {
		big.commit(t, entry(i))
	}
	mine := &writer{log: e.log, store: memStore(t), task: "mine"}
	for i := range 20 {
		mine.commit(t, entry(i))
	}
	dst := memStore(t)
	lim := restore.NewLimiter(1)
	release := lim.Hold()

	catchUp := restore.New(e.log, dst, restore.Options{Task: "big", Limiter: lim, Logger: zerolog.Nop()})
	caughtUp := runReplayer(ctx, catchUp)
	var urgent atomic.Bool
	urgent.Store(true)
	own := restore.New(e.log, dst, restore.Options{Task: "mine", Limiter: lim, Urgent: urgent.Load, Logger: zerolog.Nop()})
	ownDone := runReplayer(ctx, own)
	tail := restore.New(e.log, dst, restore.Options{Task: "mine", Tail: true, Member: "m2", Logger: zerolog.Nop()})

	// The urgent catch-up of the task handed over finishes under the hold.
	if end := <-ownDone; end.err != nil || end.res.Ending != restore.CaughtUp {
		t.Fatalf("urgent catch-up under a hold = (%v, %v), want caught up", end.res.Ending, end.err)
	}
	// The owner commits once more and hands the task over: the tailer,
	// which takes no slot, stops at the entry with the commit applied.
	tailed := runReplayer(ctx, tail)
	last := mine.commit(t, entry(20))
	rel := mine.commit(t, changelog.Entry{Kind: changelog.KindRelease, Epoch: 2, Successor: "m2"})
	end := <-tailed
	if end.err != nil || end.res.Ending != restore.AtRelease || end.res.Release.Seq != rel {
		t.Fatalf("tailer under a hold = (%v, %+v, %v), want it at the release entry %d", end.res.Ending, end.res.Release, end.err, rel)
	}
	if m, _, _ := dst.Meta("mine"); m.Applied != last {
		t.Fatalf("the successor applied up to %d before the release entry, want %d", m.Applied, last)
	}
	// Meanwhile the held catch-up has applied nothing.
	if p := catchUp.Progress(); p.Replayed != 0 {
		t.Fatalf("the held catch-up applied %d messages during the hand-off, want 0", p.Replayed)
	}
	select {
	case end := <-caughtUp:
		t.Fatalf("the held catch-up ended (%v, %v) during the hold", end.res.Ending, end.err)
	default:
	}

	release()
	release() // a second call changes nothing
	if end := <-caughtUp; end.err != nil || end.res.Ending != restore.CaughtUp {
		t.Fatalf("catch-up after the hold = (%v, %v), want caught up", end.res.Ending, end.err)
	}
	requireSameState(t, dst, big.store, "big")
	if lim.Held() {
		t.Error("Held() = true after the release")
	}
}

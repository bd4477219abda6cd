package changelog_test

import (
	"testing"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/natstest"
)

// TestLastFromLeader agrees with Last: 0 on an empty subject, then the
// sequence of each append as it lands, per subject.
func TestLastFromLeader(t *testing.T) {
	srv := natstest.Start(t)
	l := openLog(t, srv.JetStream(t), "g")
	ctx := testContext(t)
	if got, err := l.LastFromLeader(ctx, "t1"); err != nil || got != 0 {
		t.Fatalf("LastFromLeader(empty) = %d, %v, want 0, nil", got, err)
	}
	var last uint64
	for i := 0; i < 3; i++ {
		seq, err := l.Append(ctx, "t1", last, changelog.Entry{Kind: changelog.KindCommit, Epoch: 1})
		if err != nil {
			t.Fatal(err)
		}
		last = seq
		if _, err := l.Append(ctx, "t2", 0, changelog.Entry{Kind: changelog.KindCommit, Epoch: 1}); err != nil && i == 0 {
			t.Fatal(err)
		}
		got, err := l.LastFromLeader(ctx, "t1")
		direct, derr := l.Last(ctx, "t1")
		if err != nil || derr != nil || got != seq || direct != seq {
			t.Fatalf("after append %d: LastFromLeader = %d, %v; Last = %d, %v; want %d", i, got, err, direct, derr, seq)
		}
	}
}

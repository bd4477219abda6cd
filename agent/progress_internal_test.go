package agent

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/natstest"
	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/statestore"
)

// TestRepublishWaitsForTheFirstReport: a learner whose replayer has not
// reported yet (it is loading a snapshot, or has not started) must not be
// republished with its zero lag, which the leader would read as caught up;
// once Run has reported, the learner is republished with Run's figures.
func TestRepublishWaitsForTheFirstReport(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Start(t)
	clog, err := changelog.Open(ctx, srv.JetStream(t), changelog.Options{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	store, err := statestore.Open(t.TempDir(), statestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := clog.Append(ctx, "t1", 0, changelog.Entry{Kind: changelog.KindEpoch, Epoch: 1}); err != nil {
		t.Fatal(err)
	}

	var got []group.Progress
	a := &Agent{
		opts:    Options{Group: "g", MemberID: "m1"},
		nc:      srv.Conn(t),
		metrics: newMetrics(prometheus.NewRegistry()),
		tasks:   map[string]*task{},
	}
	if err := a.setConfig(assign.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	a.progress = newProgressBook(func(p group.Progress) { got = append(got, p) })
	tk := &task{id: "t1", stateful: true, phase: phaseLearner}
	a.tasks["t1"] = tk

	r := restore.New(clog, store, restore.Options{Task: "t1"})
	tk.replayer.Store(r)
	a.republishProgress()
	if len(got) != 0 {
		t.Fatalf("a replayer that has not reported was published: %+v", got)
	}

	if _, err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	a.republishProgress()
	if len(got) != 1 || got[0].Task != "t1" || got[0].Lag != 0 || got[0].Applied != 1 {
		t.Fatalf("after Run reported: published %+v, want one report of t1 applied to 1 with lag 0", got)
	}

	// Reported in this generation, and recently: not again (an idle
	// learner's reports are its member's traffic); a new generation is
	// reported at once, so that the leader counts it from there.
	a.republishProgress()
	if len(got) != 1 {
		t.Fatalf("republished a fresh report: %+v", got)
	}
	a.generation = 2
	a.republishProgress()
	if len(got) != 2 || got[1].Generation != 2 {
		t.Fatalf("after a new generation: published %+v, want a second report of generation 2", got)
	}
}

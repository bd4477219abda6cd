package scenario

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/record"
)

// Expect says what a scenario promises beyond the invariants every
// scenario keeps.
type Expect struct {
	// Planned: every move after Mark was planned, so every one was handed
	// over directly (no activation after it, through the leader or not),
	// and no two workers ever ran a task at once.
	Planned bool
	// Mark is the agents' log positions from Harness.Mark: activations
	// before it (the group's start) are not judged.
	Mark map[string]int
}

// Report is what Verify measured.
type Report struct {
	// Records is every stateful task's changelog.
	Records map[string][]changelog.Record
	Events  []record.Event
	Pauses  []record.Pause
	// Activations and takeovers after the mark.
	Activations []Activation
	Takeovers   []Takeover
	// Releases counts the release entries in the stateful tasks'
	// changelogs: the direct hand-offs of stateful tasks, the group's start
	// included.
	Releases int
	Commits  int
	Refused  int
	Restarts int
}

// Verify stops the input, waits until every stateful task's committed
// checkpoint reaches the end of its input, and checks the invariants:
//
//   - every task's changelog is one chain (record.CheckChain);
//   - no commit acknowledged to a worker is missing from it, and none was
//     acknowledged after a newer owner's epoch marker;
//   - replaying it gives exactly the generator's per-key counts, with the
//     checkpoint at the end of the input;
//   - every release was followed by the next owner's start (each hand-off
//     pause is recorded), and the pauses are logged;
//   - with x.Planned, every move after x.Mark was handed over directly (no
//     activation, planned through the leader or not), and no two workers
//     ran a task at once; how many moves went which way is logged either
//     way;
//   - every member not stopped on purpose still runs.
func (h *Harness) Verify(x Expect) Report {
	h.t.Helper()
	if err := h.Gen.Stop(); err != nil {
		h.t.Fatalf("generator: %v", err)
	}
	sent, retries := h.Gen.Sent()
	h.Logf("input stopped: %d messages acknowledged (%d publish retries)", sent, retries)
	ends := h.Gen.Ends()
	h.Eventually("every task's checkpoint at the end of its input", 90*time.Second, func() error {
		reached := map[string]uint64{}
		for _, e := range h.allEvents() {
			if e.Type == client.EventCommit {
				reached[e.Task] = max(reached[e.Task], e.Checkpoint)
			}
		}
		for _, task := range h.stateful {
			if reached[task] < ends[task] {
				return fmt.Errorf("task %s committed input up to %d of %d", task, reached[task], ends[task])
			}
		}
		return nil
	})
	h.checkAlive()

	rep := Report{Records: map[string][]changelog.Record{}, Events: h.allEvents()}
	acks := map[string][]record.Acked{}
	for _, a := range record.Acks(rep.Events) {
		acks[a.Task] = append(acks[a.Task], a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	total := 0
	for _, task := range h.stateful {
		var recs []changelog.Record
		err := poll.Within(time.Minute, pollInterval, func() error { // a cluster may still be electing leaders
			var err error
			recs, err = changelog.ReadTask(ctx, h.js, h.opts.Group, task)
			return err
		})
		if err != nil {
			h.t.Fatalf("read the changelog of %s: %v", task, err)
		}
		counts, _ := h.Gen.Expected(task, ends[task])
		tc := record.CheckTask(task, recs, acks[task], record.Want{Counts: counts, End: ends[task]})
		for _, p := range tc.Problems() {
			h.t.Errorf("%s: %s", task, p)
		}
		rep.Records[task] = recs
		total += len(recs)
		rep.Releases += tc.Releases
	}
	for _, e := range rep.Events {
		switch e.Type {
		case client.EventCommit:
			rep.Commits++
		case client.EventRefused:
			rep.Refused++
		case client.EventRestart:
			rep.Restarts++
		}
	}
	h.Logf("changelog: %d messages over %d stateful tasks; workers: %d acknowledged commits, %d refused, %d restarts",
		total, len(h.stateful), rep.Commits, rep.Refused, rep.Restarts)

	for _, p := range record.Pauses(rep.Events, time.Now()) {
		if p.Unfinished {
			h.t.Errorf("release of %s by %s (%s) was never followed by the next owner's start: a hand-off without a recorded pause",
				p.Task, p.From, p.Released.Format(time.RFC3339Nano))
			continue
		}
		if p.Overlapped {
			// Fails below in a planned scenario; under faults, an old owner
			// cut off from the group hears of its revoke late.
			h.Logf("%s's next owner %s started it (%s) before %s's worker stopped it (%s): the two ran it at once",
				p.Task, p.To, p.End.Format(time.RFC3339Nano), p.From, p.Start.Format(time.RFC3339Nano))
			continue
		}
		rep.Pauses = append(rep.Pauses, p)
	}
	h.logPauses(rep.Pauses)
	h.logCommitGaps(rep.Events)

	rep.Activations = h.activationsAfter(x.Mark)
	for _, m := range h.Members() {
		rep.Takeovers = append(rep.Takeovers, m.Log.TakeoversAfter(x.Mark[m.ID])...)
	}
	h.checkActivations(rep.Activations, x.Planned)
	h.Logf("hand-offs after the mark: %d taken over directly; %d release entries in the changelogs in all", len(rep.Takeovers), rep.Releases)
	if x.Planned {
		for _, o := range record.Overlaps(rep.Events) {
			h.t.Errorf("two owners at once in a planned scenario: %s", o)
		}
	}
	for _, m := range h.Members() {
		if n, last := m.Events.Bad(); n > 0 {
			h.Logf("%s's event log: %d undecodable lines (last %s)", m.ID, n, last)
		}
		if errs := m.Log.Errors(); len(errs) > 0 {
			h.Logf("%s's agent logged %d errors, e.g. %q", m.ID, len(errs), errs[0])
		}
	}
	return rep
}

// activationsAfter collects every agent's activations logged after mark.
func (h *Harness) activationsAfter(mark map[string]int) []Activation {
	var out []Activation
	for _, m := range h.Members() {
		out = append(out, m.Log.ActivationsAfter(mark[m.ID])...)
	}
	return out
}

// checkActivations logs the activations and, for planned scenarios, fails
// on every one: a planned move is handed over directly (a takeover, no
// activation), so an activation there is a move that went through the
// leader (planned) or a failover (unplanned). Through the leader, it would
// still have to replay nothing: the learner tails the changelog up to the
// previous owner's released sequence before it stops.
func (h *Harness) checkActivations(acts []Activation, planned bool) {
	h.t.Helper()
	var nPlanned, nUnplanned int
	var replayedPlanned, replayedUnplanned uint64
	for _, a := range acts {
		if a.Planned {
			nPlanned++
			replayedPlanned += a.Replayed
		} else {
			nUnplanned++
			replayedUnplanned += a.Replayed
		}
		if planned {
			h.t.Errorf("activation of %s on %s at epoch %d: planned=%v replayed=%d, want every planned move handed over directly",
				a.Task, a.Member, a.Epoch, a.Planned, a.Replayed)
		}
	}
	h.Logf("activations: %d planned through the leader (replayed %d messages), %d unplanned (replayed %d messages)",
		nPlanned, replayedPlanned, nUnplanned, replayedUnplanned)
}

// logPauses logs the hand-off pauses' distribution.
func (h *Harness) logPauses(pauses []record.Pause) {
	ds := make([]time.Duration, len(pauses))
	for i, p := range pauses {
		ds[i] = p.Duration
	}
	h.Logf("hand-off pauses: %d; p50 %s, p99 %s, max %s", len(ds),
		record.Percentile(ds, 50).Round(time.Microsecond), record.Percentile(ds, 99).Round(time.Microsecond),
		record.Percentile(ds, 100).Round(time.Microsecond))
	sorted := append([]record.Pause(nil), pauses...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Duration > sorted[j].Duration })
	for _, p := range sorted[:min(3, len(sorted))] {
		h.Logf("  longest: %s %s→%s epoch %d: %s", p.Task, p.From, p.To, p.Epoch, p.Duration.Round(time.Microsecond))
	}
}

// checkAlive fails the test for every member process that exited although
// the scenario did not stop it.
func (h *Harness) checkAlive() {
	h.t.Helper()
	if err := h.exited(); err != nil {
		h.t.Error(err)
	}
}

// logCommitGaps logs the longest time each of the worst tasks went without
// an acknowledged commit while input kept coming: what a failover, a
// restore or a NATS outage cost it, planned or not.
func (h *Harness) logCommitGaps(events []record.Event) {
	last := map[string]time.Time{}
	type gap struct {
		task     string
		from, to time.Time
	}
	var gaps []gap
	sorted := append([]record.Event(nil), events...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Time.Before(sorted[j].Time) })
	for _, e := range sorted {
		if e.Type != client.EventCommit {
			continue
		}
		if l, ok := last[e.Task]; ok {
			gaps = append(gaps, gap{e.Task, l, e.Time})
		}
		last[e.Task] = e.Time
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i].to.Sub(gaps[i].from) > gaps[j].to.Sub(gaps[j].from) })
	for _, g := range gaps[:min(3, len(gaps))] {
		h.Logf("  longest without a commit: %s for %s (from %s)", g.task, g.to.Sub(g.from).Round(time.Millisecond), g.from.Format("15:04:05.000"))
	}
}

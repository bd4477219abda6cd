package demo

import (
	"fmt"
	"io"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/cmd/handoff-lab/internal/bench"
	"github.com/handoffhq/handoff/internal/lab"
	"github.com/handoffhq/handoff/internal/record"
)

// report is what the demo's report says. Its figures cover the run from
// the scale-up on (see runner.run).
type report struct {
	settings           settings
	elapsed            time.Duration
	pauses             []record.Pause
	spikes             []record.Spike // of every move from the steady start on
	since              time.Time      // the scale-up
	replays            []lab.Replay
	activationReplayed float64
	direct             float64 // hand-offs taken over directly
	genFrom, genTo     uint64
	learnerSeconds     float64
	check              lab.CheckResult
}

// writeReport prints the report: moves, pauses, what learners
// replayed, generations and the exact-count check.
func writeReport(w io.Writer, r report) {
	var all []time.Duration
	stateful, stateless := 0, 0
	for _, p := range r.pauses {
		all = append(all, p.Duration)
		if p.Stateful {
			stateful++
		} else {
			stateless++
		}
	}
	var learned, activated bench.ReplayTotals
	for _, rp := range r.replays {
		t := &learned
		if rp.Role == api.RoleActive {
			t = &activated
		}
		t.Runs++
		t.Messages += rp.Messages
		t.Records += rp.Records
		t.Bytes += rp.Bytes
	}
	st := bench.PauseStatsOf(all)
	fmt.Fprintf(w, "Report (%s mode, %s in all; from the scale-up on)\n", r.settings.handover, r.elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  moves          %d hand-offs: %d stateful, %d stateless\n", len(r.pauses), stateful, stateless)
	if st.Count > 0 {
		fmt.Fprintf(w, "  pauses         p50 %s · p99 %s · max %s  (next owner's worker start − previous owner's worker stop to release it)\n",
			bench.Millis(st.P50), bench.Millis(st.P99), bench.Millis(st.Max))
	}
	var excess, steady []time.Duration
	for _, sp := range r.spikes {
		if sp.Pause.Kind == record.PausePlanned && sp.Pause.Stateful && !sp.Pause.Start.Before(r.since) {
			excess, steady = append(excess, sp.Excess), append(steady, sp.Steady)
		}
	}
	if sp := bench.PauseStatsOf(excess); sp.Count > 0 {
		fmt.Fprintf(w, "  spikes         p50 %s · p99 %s · max %s  (the moved task's worst event latency around the move, over its steady p50 of %s; %d of %d stateful moves measured)\n",
			bench.Millis(sp.P50), bench.Millis(sp.P99), bench.Millis(sp.Max), bench.Millis(bench.PauseStatsOf(steady).P50), sp.Count, stateful)
	}
	fmt.Fprintf(w, "  learners       replayed %s records (%s) in %d changelog messages over %d restores; %.2f learner-seconds\n",
		bench.Count(float64(learned.Records)), bench.Bytes(float64(learned.Bytes)), learned.Messages, learned.Runs, r.learnerSeconds)
	fmt.Fprintf(w, "  direct         %.0f of the %d hand-offs taken over by the successor from the changelog (a release entry) or a hand-off message, without waiting for the leader; the others through the leader's generation\n", r.direct, len(r.pauses))
	fmt.Fprintf(w, "  activations    replayed %.0f changelog messages (a planned move finds its learner current: nothing to replay)\n", r.activationReplayed)
	fmt.Fprintf(w, "  generations    %d → %d\n", r.genFrom, r.genTo)
	verdict := r.check.Summary()
	if r.check.Exact {
		verdict += " (every task's changelog replayed with internal/record and compared with the generated input and the workers' acknowledgements)"
	}
	fmt.Fprintf(w, "  counts         %s\n", verdict)
}

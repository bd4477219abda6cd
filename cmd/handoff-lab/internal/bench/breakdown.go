package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/handoffhq/handoff/internal/lab"
	"github.com/handoffhq/handoff/internal/record"
)

// breakdownJSON is the per-step breakdown of a run's planned stateful
// moves, from the processes' logs (a bench of processes only).
type breakdownJSON struct {
	Moves int `json:"moves"`
	// Direct counts the moves handed over directly (release entry or
	// message), the others went through the leader.
	Direct int `json:"direct"`
	// Pause and Spike summarize these moves' pauses and, where measured,
	// their excess event latency (record.Spikes), beside the steps.
	Pause PauseStats `json:"pause"`
	Spike PauseStats `json:"spike"`
	Steps []stepJSON `json:"steps"`
	// Activation splits the activation into its steps (lab.ActivationSteps),
	// each one's duration.
	Activation []stepJSON `json:"activation,omitempty"`
	// AssignmentRead is the new owner's read of its assignment
	// (lab.AssignmentReadStep), before the activation; nil where no
	// agent logged it.
	AssignmentRead *stepJSON `json:"assignmentRead,omitempty"`
	// Handoffs are the moves one by one: each step in ms after the old
	// owner's worker stopped the task to release it (null: not logged).
	Handoffs []handoffJSON `json:"handoffs"`
}

// stepJSON is one step over every move whose logs show it: when it
// happened after the release, and how long it took after the step before
// it (the previous one the logs show).
type stepJSON struct {
	Step         string     `json:"step"`
	SinceRelease PauseStats `json:"sinceRelease"`
	Took         PauseStats `json:"took"`
}

type handoffJSON struct {
	Task    string     `json:"task"`
	From    string     `json:"from"`
	To      string     `json:"to"`
	Epoch   uint64     `json:"epoch"`
	Direct  bool       `json:"direct"`
	StepsMS []*float64 `json:"stepsMs"`
	// SpikeMS is the move's excess event latency, where it was measured.
	SpikeMS *float64 `json:"spikeMs,omitempty"`
}

// breakdown summarizes the planned stateful moves among hs, with the
// spikes measured of them.
func breakdown(hs []lab.Handoff, spikes []record.Spike) *breakdownJSON {
	b := &breakdownJSON{}
	byPause := map[pauseKey]record.Spike{}
	for _, sp := range spikes {
		byPause[pauseKey{sp.Pause.Task, sp.Pause.Start.UnixNano()}] = sp
	}
	var pauses, excess []time.Duration
	since := make([][]time.Duration, len(lab.HandoffSteps))
	took := make([][]time.Duration, len(lab.HandoffSteps))
	act := make([][]time.Duration, len(lab.ActivationSteps))
	var reads []time.Duration
	for _, h := range hs {
		if !h.Stateful {
			continue
		}
		b.Moves++
		if h.Direct {
			b.Direct++
		}
		if h.AssignmentRead != nil {
			reads = append(reads, *h.AssignmentRead)
		}
		for i, d := range h.Activation {
			if i < len(act) {
				act[i] = append(act[i], d)
			}
		}
		hj := handoffJSON{Task: h.Task, From: h.From, To: h.To, Epoch: h.Epoch, Direct: h.Direct, StepsMS: make([]*float64, len(h.Steps))}
		if d, ok := h.Since(lab.StepLongPollAnswered); ok {
			pauses = append(pauses, d)
		}
		if sp, ok := byPause[pauseKey{h.Task, h.Release.UnixNano()}]; ok {
			ms := durMS(sp.Excess)
			hj.SpikeMS = &ms
			excess = append(excess, sp.Excess)
		}
		prev := time.Time{}
		for i := range h.Steps {
			d, ok := h.Since(i)
			if !ok {
				continue
			}
			ms := durMS(d)
			hj.StepsMS[i] = &ms
			since[i] = append(since[i], d)
			if !prev.IsZero() {
				took[i] = append(took[i], h.Steps[i].Sub(prev))
			}
			prev = h.Steps[i]
		}
		b.Handoffs = append(b.Handoffs, hj)
	}
	if b.Moves == 0 {
		return nil
	}
	b.Pause, b.Spike = PauseStatsOf(pauses), PauseStatsOf(excess)
	for i, name := range lab.HandoffSteps {
		b.Steps = append(b.Steps, stepJSON{Step: name, SinceRelease: PauseStatsOf(since[i]), Took: PauseStatsOf(took[i])})
	}
	if len(reads) > 0 {
		b.AssignmentRead = &stepJSON{Step: lab.AssignmentReadStep, Took: PauseStatsOf(reads)}
	}
	if len(act[0]) > 0 {
		for i, name := range lab.ActivationSteps {
			b.Activation = append(b.Activation, stepJSON{Step: name, Took: PauseStatsOf(act[i])})
		}
	}
	return b
}

// writeBreakdowns writes each run's breakdown as a table.
func writeBreakdowns(w io.Writer, r Results) error {
	for _, run := range r.Runs {
		b := run.Breakdown
		if b == nil {
			continue
		}
		fmt.Fprintf(w, "\nHand-off breakdown, %s: %d planned stateful moves (%d handed over directly, %d through the leader), from the agents' logs and the workers' events\n",
			run.Mode, b.Moves, b.Direct, b.Moves-b.Direct)
		fmt.Fprintf(w, "pause p50 / p99 %s / %s; excess event latency (spike) p50 / p99 %s over %d of the moves\n",
			Millis(b.Pause.P50), Millis(b.Pause.P99), spikeCell(b.Spike), b.Spike.Count)
		fmt.Fprintln(w, "(ms after the old owner's worker stopped the task to release it, which starts the pause; a direct hand-off skips the leader's steps; nearest-rank percentiles)")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "step\tsince release p50 / p99\tstep p50 / p99\tmoves\t")
		for _, st := range b.Steps {
			if st.SinceRelease.Count == 0 {
				fmt.Fprintf(tw, "%s\tnot logged\t-\t0\t\n", st.Step)
				continue
			}
			took := "-"
			if st.Took.Count > 0 {
				took = fmt.Sprintf("%.2f / %.2f", st.Took.P50, st.Took.P99)
			}
			fmt.Fprintf(tw, "%s\t%.2f / %.2f\t%s\t%d\t\n", st.Step, st.SinceRelease.P50, st.SinceRelease.P99, took, st.SinceRelease.Count)
			if st.Step == lab.HandoffSteps[lab.StepActivationFenced] {
				parts := b.Activation
				if b.AssignmentRead != nil {
					parts = append([]stepJSON{*b.AssignmentRead}, parts...)
				}
				for _, a := range parts {
					fmt.Fprintf(tw, "  of which: %s\t\t%.2f / %.2f\t%d\t\n", a.Step, a.Took.P50, a.Took.P99, a.Took.Count)
				}
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Results is everything one bench run found.
type Results struct {
	Settings Settings  `json:"settings"`
	Started  time.Time `json:"started"`
	Runs     []modeRun `json:"runs"`
	Figures  []figure  `json:"figures"`
}

// figure is a headline figure of the run, with its target.
type figure struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
	Note   string `json:"note,omitempty"`
}

// run returns the run of mode, if it was measured.
func (r Results) run(mode string) (modeRun, bool) {
	for _, run := range r.Runs {
		if run.Mode == mode && run.Available && run.Error == "" {
			return run, true
		}
	}
	return modeRun{}, false
}

// figures computes the headline figures from the runs that have them.
func figures(r Results) []figure {
	var out []figure
	met := func(ok bool) *bool { return &ok }
	where := "in one process"
	if r.Settings.Processes {
		where = "across processes"
	}
	for _, mode := range []string{modeEager, modeStable} {
		run, ok := r.run(mode)
		if !ok || run.Pauses.PlannedStateful.Count == 0 {
			continue
		}
		p := run.Pauses.PlannedStateful
		if sp := run.Spikes.PlannedStateful; sp.Count > 0 {
			out = append(out, figure{
				Name: fmt.Sprintf("planned-move spike, the moved task's worst event latency around the move over its steady p50 (%s, %s)", mode, where),
				Value: fmt.Sprintf("p50 %.1f ms, p99 %.1f ms (max %.1f ms, %d of %d moves measured; steady latency p50 %.1f ms)",
					sp.P50, sp.P99, sp.Max, sp.Count, p.Count, run.Spikes.Steady.P50),
				Target: "p50 ≤ 5 ms, p99 ≤ 15 ms", Met: met(sp.P50 <= 5 && sp.P99 <= 15),
			})
		}
		out = append(out, figure{
			Name:   fmt.Sprintf("planned-move pause, old owner's stop → new owner's worker starts (%s, %s)", mode, where),
			Value:  fmt.Sprintf("p50 %.1f ms, p99 %.1f ms (max %.1f ms, %d moves)", p.P50, p.P99, p.Max, p.Count),
			Target: "p50 ≤ 5 ms, p99 ≤ 15 ms", Met: met(p.P50 <= 5 && p.P99 <= 15),
		})
		if b := run.Breakdown; b != nil {
			c := b.Steps[len(b.Steps)-1].SinceRelease
			if c.Count > 0 {
				out = append(out, figure{
					Name:   fmt.Sprintf("old owner's stop → new owner's first accepted commit (%s, %s)", mode, where),
					Value:  fmt.Sprintf("p50 %.1f ms, p99 %.1f ms (max %.1f ms, %d moves)", c.P50, c.P99, c.Max, c.Count),
					Target: "p50 ≤ 5 ms, p99 ≤ 15 ms", Met: met(c.P50 <= 5 && c.P99 <= 15),
					Note: fmt.Sprintf("includes the wait for the task's next input message when none was waiting at its start (--rate over every task); the worker commits at once after a start, then at most --worker-max-delay (%s) after it read a message", r.Settings.WorkerMaxDelay),
				})
			}
		}
	}
	warm, warmOK := r.run(modeEager)
	if !warmOK {
		warm, warmOK = r.run(modeStable)
	}
	cold, coldOK := r.run(modeCold)
	if !coldOK {
		cold, coldOK = r.run(modeColdSim)
	}
	if warmOK && coldOK && warm.Pauses.PlannedStateful.Count > 0 && cold.Pauses.PlannedStateful.Count > 0 {
		w, c := warm.Pauses.PlannedStateful, cold.Pauses.PlannedStateful
		f := figure{
			Name:   fmt.Sprintf("warm/cold pause ratio (%s vs %s, p50)", warm.Mode, cold.Mode),
			Value:  fmt.Sprintf("%.2f%% (%.1f ms vs %.0f ms; p99 %.2f%%)", 100*w.P50/c.P50, w.P50, c.P50, 100*w.P99/c.P99),
			Target: "≤ 1%", Met: met(w.P50/c.P50 <= 0.01),
		}
		if cold.Mode == modeColdSim {
			f.Note = "cold is unavailable; cold-sim approximates it (see docs/bench.md)"
		}
		out = append(out, f)
	} else if warmOK {
		out = append(out, figure{Name: "warm/cold pause ratio", Value: "not measured",
			Note: "no cold or cold-sim run with planned stateful moves"})
	}
	eager, eok := r.run(modeEager)
	stable, sok := r.run(modeStable)
	if eok && sok {
		out = append(out, figure{
			Name: "eager vs stable",
			Value: fmt.Sprintf("time to balanced %s vs %s; generations %d vs %d; learner-seconds %.2f vs %.2f",
				seconds(eager.TimeToBalancedMS), seconds(stable.TimeToBalancedMS), eager.Generations, stable.Generations,
				eager.LearnerSeconds, stable.LearnerSeconds),
		})
	}
	if r.Settings.Scenario == scenarioScaleUp {
		for _, mode := range []string{modeEager, modeStable} {
			run, ok := r.run(mode)
			if !ok || run.Restore.TookMS <= 0 || run.NewcomerTasks == 0 {
				continue
			}
			inRow := float64(run.NewcomerTasks) * run.Restore.TookMS
			ratio := run.TimeToBalancedMS / inRow
			out = append(out, figure{
				Name: "scale-up time to balanced / the newcomer's restores one after another (" + mode + ")",
				Value: fmt.Sprintf("%.2f× (%s / %d × %s; %.1f× one restore)", ratio, seconds(run.TimeToBalancedMS),
					run.NewcomerTasks, seconds(run.Restore.TookMS), run.TimeToBalancedMS/run.Restore.TookMS),
				Target: "≤ 1.5×", Met: met(ratio <= 1.5),
				Note: "every stateful task holds the same history; the reference restore is measured alone, before the members start",
			})
		}
	}
	return out
}

// writeTable writes the results for people.
func writeTable(w io.Writer, r Results) error {
	s := r.Settings
	layout := "in one process (agents, workers and NATS share it)"
	if s.Processes {
		layout = "separate processes (nats-server; per member a handoff agent and a counter worker over HTTP)"
	}
	fmt.Fprintf(w, "handoff-lab bench · %s · %d stateful + %d stateless tasks · state %d keys × %d B per task · input %d msg/s · standbys %d\n",
		scenarioTitle(s), s.stateful(), s.stateless(), s.Keys, s.ValueSize, s.Rate, s.Standbys)
	fmt.Fprintf(w, "members run %s · workers commit within %s of a read\n", layout, s.WorkerMaxDelay)
	fmt.Fprintf(w, "started %s · session timeout %s · sampled every %s · seed %d\n\n", r.Started.Format(time.RFC3339), s.Session, s.Sample, s.Seed)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, cell func(modeRun) string) {
		cells := []string{name}
		for _, run := range r.Runs {
			if !run.Available || run.Error != "" {
				cells = append(cells, "-")
				continue
			}
			cells = append(cells, cell(run))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	header := []string{""}
	status := []string{"status"}
	for _, run := range r.Runs {
		header = append(header, run.Mode)
		switch {
		case !run.Available:
			status = append(status, "unavailable")
		case run.Error != "":
			status = append(status, "failed")
		default:
			status = append(status, "ok")
		}
	}
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	fmt.Fprintln(tw, strings.Join(status, "\t")+"\t")
	row("counts", func(run modeRun) string {
		if run.Exact {
			return "exact"
		}
		return "NOT EXACT"
	})
	row("time to balanced", func(run modeRun) string {
		if !run.Balanced {
			return "not balanced"
		}
		return seconds(run.TimeToBalancedMS)
	})
	row("generations", func(run modeRun) string { return fmt.Sprint(run.Generations) })
	row("moves: stateful / stateless / failover", func(run modeRun) string {
		return fmt.Sprintf("%d / %d / %d", run.Pauses.PlannedStateful.Count, run.Pauses.PlannedStateless.Count, run.Pauses.Failover.Count)
	})
	row("stateful pause p50 / p99 / max", func(run modeRun) string { return statsCell(run.Pauses.PlannedStateful) })
	row("stateful spike p50 / p99 / max", func(run modeRun) string { return statsCell(run.Spikes.PlannedStateful) })
	row("  moves measured / steady latency p50", func(run modeRun) string {
		return fmt.Sprintf("%d / %s", run.Spikes.PlannedStateful.Count, spikeCell(run.Spikes.Steady))
	})
	row("stateless pause p50 / p99 / max", func(run modeRun) string { return statsCell(run.Pauses.PlannedStateless) })
	row("failover pause p50 / p99 / max", func(run modeRun) string { return statsCell(run.Pauses.Failover) })
	row("task-seconds unavailable", func(run modeRun) string { return fmt.Sprintf("%.3f", run.TaskSecondsUnavailable) })
	row("learner-seconds", func(run modeRun) string { return fmt.Sprintf("%.2f", run.LearnerSeconds) })
	row("restoring-seconds (owner replays)", func(run modeRun) string { return fmt.Sprintf("%.2f", run.RestoringSeconds) })
	row("replayed by learners", func(run modeRun) string { return replayCell(run.ReplayedByLearners) })
	row("replayed by activations", func(run modeRun) string { return replayCell(run.ReplayedByActivations) })
	row("activation replay metric (msgs)", func(run modeRun) string { return fmt.Sprintf("%.0f", run.ActivationReplayedMetric) })
	row("throughput before → during (msg/s)", func(run modeRun) string {
		return fmt.Sprintf("%.0f → %.0f", run.Throughput.Before, run.Throughput.During)
	})
	row("worst 250 ms window (dip)", func(run modeRun) string {
		return fmt.Sprintf("%.0f (-%.0f%%)", run.Throughput.Worst, run.Throughput.DipPercent)
	})
	row("reference restore (1 task)", func(run modeRun) string {
		return fmt.Sprintf("%s: %s rec/s, %s/s", seconds(run.Restore.TookMS), Count(run.Restore.RecordsPerS), Bytes(run.Restore.BytesPerS))
	})
	row("raw replay ceiling (same task)", func(run modeRun) string {
		return fmt.Sprintf("%s: %s msg/s, %s/s", seconds(run.Ceiling.TookMS), Count(run.Ceiling.MessagesPerS), Bytes(run.Ceiling.BytesPerS))
	})
	row("learners' restore rate (median)", func(run modeRun) string { return Count(run.LearnerRestoreRate) + " rec/s" })
	row("load average before / after", func(run modeRun) string { return fmt.Sprintf("%.1f / %.1f", run.Load[0], run.Load[1]) })
	row("timeline", func(run modeRun) string { return dash(run.Timeline) })
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, run := range r.Runs {
		switch {
		case !run.Available:
			fmt.Fprintf(w, "\n%s unavailable: %s", run.Mode, run.Unavailable)
			if run.Mode == modeCold {
				fmt.Fprint(w, " (cold needs the assignor's handover mode \"cold\"; run --modes cold-sim for an approximation)")
			}
			fmt.Fprintln(w)
		case run.Error != "":
			fmt.Fprintf(w, "\n%s failed: %s\n", run.Mode, run.Error)
		case !run.Exact:
			fmt.Fprintf(w, "\n%s: %s\n", run.Mode, run.Check)
		}
	}
	if err := writeBreakdowns(w, r); err != nil {
		return err
	}
	if len(r.Figures) > 0 {
		fmt.Fprintln(w, "\nFigures: pauses, time to balanced, bytes replayed")
		for _, f := range r.Figures {
			verdict := ""
			if f.Met != nil {
				verdict = "  ✗ target " + f.Target
				if *f.Met {
					verdict = "  ✓ target " + f.Target
				}
			}
			fmt.Fprintf(w, "  %s: %s%s\n", f.Name, f.Value, verdict)
			if f.Note != "" {
				fmt.Fprintf(w, "      (%s)\n", f.Note)
			}
		}
	}
	return nil
}

// spikeCell prints p50 / p99 of p, or - if it has none.
func spikeCell(p PauseStats) string {
	if p.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s", Millis(p.P50), Millis(p.P99))
}

func statsCell(p PauseStats) string {
	if p.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s / %s", Millis(p.P50), Millis(p.P99), Millis(p.Max))
}

// Millis prints milliseconds for a table cell: to 0.1 ms below 10 ms, to
// the millisecond below a second, in seconds above.
func Millis(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.1f ms", v)
	case v < 1000:
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.2f s", v/1000)
}

func replayCell(t ReplayTotals) string {
	if t.Messages == 0 {
		return "0"
	}
	return fmt.Sprintf("%s rec, %s", Count(float64(t.Records)), Bytes(float64(t.Bytes)))
}

// seconds prints milliseconds as seconds.
func seconds(msec float64) string {
	if msec < 1000 {
		return fmt.Sprintf("%.0f ms", msec)
	}
	return fmt.Sprintf("%.2f s", msec/1000)
}

// Count prints a number with a k or M suffix.
func Count(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// Bytes prints a byte count in KiB, MiB or GiB.
func Bytes(v float64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%.2f GiB", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B", v)
}

// dash shows an empty table cell as -.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

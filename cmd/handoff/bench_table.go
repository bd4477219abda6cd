package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// benchResults is everything one bench run found.
type benchResults struct {
	Settings benchSettings `json:"settings"`
	Started  time.Time     `json:"started"`
	Runs     []benchRun    `json:"runs"`
	Figures  []benchFigure `json:"figures"`
}

// benchFigure is a headline figure of the run, with its target.
type benchFigure struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
	Note   string `json:"note,omitempty"`
}

// run returns the run of mode, if it was measured.
func (r benchResults) run(mode string) (benchRun, bool) {
	for _, run := range r.Runs {
		if run.Mode == mode && run.Available && run.Error == "" {
			return run, true
		}
	}
	return benchRun{}, false
}

// benchFigures computes the headline figures from the runs that have them.
func benchFigures(r benchResults) []benchFigure {
	var out []benchFigure
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
		out = append(out, benchFigure{
			Name:   fmt.Sprintf("planned-move pause, release → new owner's worker starts (%s, %s)", mode, where),
			Value:  fmt.Sprintf("p50 %.1f ms, p99 %.1f ms (max %.1f ms, %d moves)", p.P50, p.P99, p.Max, p.Count),
			Target: "p50 ≤ 5 ms, p99 ≤ 15 ms", Met: met(p.P50 <= 5 && p.P99 <= 15),
		})
		if b := run.Breakdown; b != nil {
			c := b.Steps[len(b.Steps)-1].SinceRelease
			if c.Count > 0 {
				out = append(out, benchFigure{
					Name:   fmt.Sprintf("release → new owner's first accepted commit (%s, %s)", mode, where),
					Value:  fmt.Sprintf("p50 %.1f ms, p99 %.1f ms (max %.1f ms, %d moves)", c.P50, c.P99, c.Max, c.Count),
					Target: "p50 ≤ 5 ms, p99 ≤ 15 ms", Met: met(c.P50 <= 5 && c.P99 <= 15),
					Note: fmt.Sprintf("includes the worker's batching: it commits at most --worker-max-delay (%s) after it read a message", r.Settings.WorkerMaxDelay),
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
		f := benchFigure{
			Name:   fmt.Sprintf("warm/cold pause ratio (%s vs %s, p50)", warm.Mode, cold.Mode),
			Value:  fmt.Sprintf("%.2f%% (%.1f ms vs %.0f ms; p99 %.2f%%)", 100*w.P50/c.P50, w.P50, c.P50, 100*w.P99/c.P99),
			Target: "≤ 1%", Met: met(w.P50/c.P50 <= 0.01),
		}
		if cold.Mode == modeColdSim {
			f.Note = "cold is unavailable; cold-sim approximates it (see docs/bench.md)"
		}
		out = append(out, f)
	} else if warmOK {
		out = append(out, benchFigure{Name: "warm/cold pause ratio", Value: "not measured",
			Note: "no cold or cold-sim run with planned stateful moves"})
	}
	eager, eok := r.run(modeEager)
	stable, sok := r.run(modeStable)
	if eok && sok {
		out = append(out, benchFigure{
			Name: "eager vs stable",
			Value: fmt.Sprintf("time to balanced %s vs %s; generations %d vs %d; learner-seconds %.2f vs %.2f",
				benchSeconds(eager.TimeToBalancedMS), benchSeconds(stable.TimeToBalancedMS), eager.Generations, stable.Generations,
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
			out = append(out, benchFigure{
				Name: "scale-up time to balanced / the newcomer's restores one after another (" + mode + ")",
				Value: fmt.Sprintf("%.2f× (%s / %d × %s; %.1f× one restore)", ratio, benchSeconds(run.TimeToBalancedMS),
					run.NewcomerTasks, benchSeconds(run.Restore.TookMS), run.TimeToBalancedMS/run.Restore.TookMS),
				Target: "≤ 1.5×", Met: met(ratio <= 1.5),
				Note: "every stateful task holds the same history; the reference restore is measured alone, before the members start",
			})
		}
	}
	return out
}

// writeBenchTable writes the results for people.
func writeBenchTable(w io.Writer, r benchResults) error {
	s := r.Settings
	layout := "in one process (agents, workers and NATS share it)"
	if s.Processes {
		layout = "separate processes (nats-server; per member a handoff agent and a counter worker over HTTP)"
	}
	fmt.Fprintf(w, "handoff bench · %s · %d stateful + %d stateless tasks · state %d keys × %d B per task · input %d msg/s · standbys %d\n",
		scenarioTitle(s), s.stateful(), s.stateless(), s.Keys, s.ValueSize, s.Rate, s.Standbys)
	fmt.Fprintf(w, "members run %s · workers commit within %s of a read\n", layout, s.WorkerMaxDelay)
	fmt.Fprintf(w, "started %s · session timeout %s · sampled every %s · seed %d\n\n", r.Started.Format(time.RFC3339), s.Session, s.Sample, s.Seed)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, cell func(benchRun) string) {
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
	row("counts", func(run benchRun) string {
		if run.Exact {
			return "exact"
		}
		return "NOT EXACT"
	})
	row("time to balanced", func(run benchRun) string {
		if !run.Balanced {
			return "not balanced"
		}
		return benchSeconds(run.TimeToBalancedMS)
	})
	row("generations", func(run benchRun) string { return fmt.Sprint(run.Generations) })
	row("moves: stateful / stateless / failover", func(run benchRun) string {
		return fmt.Sprintf("%d / %d / %d", run.Pauses.PlannedStateful.Count, run.Pauses.PlannedStateless.Count, run.Pauses.Failover.Count)
	})
	row("stateful pause p50 / p99 / max", func(run benchRun) string { return benchStatsCell(run.Pauses.PlannedStateful) })
	row("stateless pause p50 / p99 / max", func(run benchRun) string { return benchStatsCell(run.Pauses.PlannedStateless) })
	row("failover pause p50 / p99 / max", func(run benchRun) string { return benchStatsCell(run.Pauses.Failover) })
	row("task-seconds unavailable", func(run benchRun) string { return fmt.Sprintf("%.3f", run.TaskSecondsUnavailable) })
	row("learner-seconds", func(run benchRun) string { return fmt.Sprintf("%.2f", run.LearnerSeconds) })
	row("restoring-seconds (owner replays)", func(run benchRun) string { return fmt.Sprintf("%.2f", run.RestoringSeconds) })
	row("replayed by learners", func(run benchRun) string { return benchReplayCell(run.ReplayedByLearners) })
	row("replayed by activations", func(run benchRun) string { return benchReplayCell(run.ReplayedByActivations) })
	row("activation replay metric (msgs)", func(run benchRun) string { return fmt.Sprintf("%.0f", run.ActivationReplayedMetric) })
	row("throughput before → during (msg/s)", func(run benchRun) string {
		return fmt.Sprintf("%.0f → %.0f", run.Throughput.Before, run.Throughput.During)
	})
	row("worst 250 ms window (dip)", func(run benchRun) string {
		return fmt.Sprintf("%.0f (-%.0f%%)", run.Throughput.Worst, run.Throughput.DipPercent)
	})
	row("reference restore (1 task)", func(run benchRun) string {
		return fmt.Sprintf("%s: %s rec/s, %s/s", benchSeconds(run.Restore.TookMS), benchCount(run.Restore.RecordsPerS), benchBytes(run.Restore.BytesPerS))
	})
	row("raw replay ceiling (same task)", func(run benchRun) string {
		return fmt.Sprintf("%s: %s msg/s, %s/s", benchSeconds(run.Ceiling.TookMS), benchCount(run.Ceiling.MessagesPerS), benchBytes(run.Ceiling.BytesPerS))
	})
	row("learners' restore rate (median)", func(run benchRun) string { return benchCount(run.LearnerRestoreRate) + " rec/s" })
	row("load average before / after", func(run benchRun) string { return fmt.Sprintf("%.1f / %.1f", run.Load[0], run.Load[1]) })
	row("timeline", func(run benchRun) string { return dash(run.Timeline) })
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

func benchStatsCell(p pauseStats) string {
	if p.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s / %s", benchMSCell(p.P50), benchMSCell(p.P99), benchMSCell(p.Max))
}

func benchMSCell(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.1f ms", v)
	case v < 1000:
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.2f s", v/1000)
}

func benchReplayCell(t replayTotals) string {
	if t.Messages == 0 {
		return "0"
	}
	return fmt.Sprintf("%s rec, %s", benchCount(float64(t.Records)), benchBytes(float64(t.Bytes)))
}

// seconds prints milliseconds as seconds.
func benchSeconds(msec float64) string {
	if msec < 1000 {
		return fmt.Sprintf("%.0f ms", msec)
	}
	return fmt.Sprintf("%.2f s", msec/1000)
}

// count prints a number with a k or M suffix.
func benchCount(v float64) string {
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

// bytesIEC prints a byte count in KiB, MiB or GiB.
func benchBytes(v float64) string {
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

package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/handoffhq/handoff/internal/lab"
)

// Size is one group size of a run at several sizes: members before and
// after the event, and tasks.
type Size struct {
	From  int `json:"from"`
	To    int `json:"to"`
	Tasks int `json:"tasks"`
}

func (z Size) String() string { return fmt.Sprintf("%d→%d, %d tasks", z.From, z.To, z.Tasks) }

// parseSizes reads --sizes into s.Sizes, and sets From and To to the first
// size's.
func parseSizes(s *Settings) error {
	for _, f := range strings.Split(s.sizes, ",") {
		parts := strings.Split(strings.TrimSpace(f), ":")
		if len(parts) < 2 || len(parts) > 3 {
			return fmt.Errorf("--sizes %q: use FROM:TO[:TASKS] separated by commas, like 3:4,32:33", s.sizes)
		}
		var z Size
		var err error
		for i, p := range parts {
			n, perr := strconv.Atoi(p)
			if perr != nil || n < 1 {
				err = fmt.Errorf("--sizes %q: %q is not a count of 1 or more", s.sizes, p)
				break
			}
			switch i {
			case 0:
				z.From = n
			case 1:
				z.To = n
			case 2:
				z.Tasks = n
			}
		}
		if err != nil {
			return err
		}
		s.Sizes = append(s.Sizes, z)
	}
	if len(s.Sizes) < 2 {
		return fmt.Errorf("--sizes %q: name at least two sizes to compare", s.sizes)
	}
	first := s.Sizes[0]
	for i := range s.Sizes {
		if s.Sizes[i].Tasks == 0 {
			s.Sizes[i].Tasks = int(math.Round(float64(s.Tasks) * float64(s.Sizes[i].From) / float64(first.From)))
		}
	}
	if first.Tasks > 0 {
		s.Tasks = first.Tasks
	}
	s.From, s.To = first.From, first.To
	return nil
}

// sizedResults are the results of a run at several sizes.
type sizedResults struct {
	Sizes []sizedRun `json:"sizes"`
	// Ratios compare the last size's figures with the first's, per mode.
	Ratios []sizeRatio `json:"ratios"`
}

type sizedRun struct {
	Size    Size    `json:"size"`
	Results Results `json:"results"`
}

// sizeRatio is one mode's figure at the last size over the first, in the
// same run.
type sizeRatio struct {
	Mode   string  `json:"mode"`
	Figure string  `json:"figure"`
	First  float64 `json:"first"`
	Last   float64 `json:"last"`
	Ratio  float64 `json:"ratio"`
}

// runSizes runs the scenario at each size, one after the other, and
// reports each size's table and the ratios.
func runSizes(ctx context.Context, s Settings, procs *lab.Processes, e Env) error {
	var res sizedResults
	for i, z := range s.Sizes {
		sz := s
		sz.From, sz.To, sz.Tasks, sz.Sizes = z.From, z.To, z.Tasks, nil
		if err := checkSize(sz); err != nil {
			return err
		}
		out := ""
		if s.Out != "" {
			out = filepath.Join(s.Out, fmt.Sprintf("size-%d-%d", z.From, z.To))
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
		}
		fmt.Fprintf(e.Stderr, "bench: size %d of %d: %s\n", i+1, len(s.Sizes), z)
		r, err := runModes(ctx, sz, procs, newProgress(e.Stderr, len(sz.Modes)), out)
		if err != nil {
			return err
		}
		res.Sizes = append(res.Sizes, sizedRun{Size: z, Results: r})
		if err := runErr(ctx, r); err != nil {
			return fmt.Errorf("size %s: %w", z, err)
		}
	}
	res.Ratios = sizeRatios(res.Sizes)
	write := func(w io.Writer) error {
		if s.JSON {
			return writeJSON(w, res)
		}
		return writeSizes(w, res)
	}
	if s.Out != "" {
		if err := writeFile(filepath.Join(s.Out, "sizes.json"), func(w io.Writer) error { return writeJSON(w, res) }); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(s.Out, "sizes.txt"), func(w io.Writer) error { return writeSizes(w, res) }); err != nil {
			return err
		}
	}
	return write(e.Stdout)
}

// checkSize checks one size's settings as parse checks a single run's.
func checkSize(s Settings) error {
	switch {
	case s.Scenario == scenarioScaleUp && s.To <= s.From:
		return fmt.Errorf("--sizes: %d:%d is no scale-up", s.From, s.To)
	case s.Scenario == scenarioScaleDown && (s.To >= s.From || s.To < 1):
		return fmt.Errorf("--sizes: %d:%d is no scale-down", s.From, s.To)
	case s.Scenario != scenarioScaleUp && s.Scenario != scenarioScaleDown:
		return fmt.Errorf("--sizes: for scale-up and scale-down, not %s", s.Scenario)
	case s.stateful() < 1:
		return fmt.Errorf("--sizes: %d tasks leave no stateful one", s.Tasks)
	}
	return nil
}

// sizeRatios compares the last size's pauses, spikes and time to balanced with the
// first's, per mode.
func sizeRatios(sizes []sizedRun) []sizeRatio {
	first, last := sizes[0].Results, sizes[len(sizes)-1].Results
	var out []sizeRatio
	for _, mode := range first.Settings.Modes {
		a, okA := first.run(mode)
		b, okB := last.run(mode)
		if !okA || !okB {
			continue
		}
		add := func(figure string, x, y float64) {
			if x > 0 {
				out = append(out, sizeRatio{Mode: mode, Figure: figure, First: x, Last: y, Ratio: y / x})
			}
		}
		add("planned stateful pause p50 (ms)", a.Pauses.PlannedStateful.P50, b.Pauses.PlannedStateful.P50)
		add("planned stateful pause p99 (ms)", a.Pauses.PlannedStateful.P99, b.Pauses.PlannedStateful.P99)
		if a.Spikes.PlannedStateful.Count > 0 && b.Spikes.PlannedStateful.Count > 0 {
			add("planned stateful spike p50 (ms)", a.Spikes.PlannedStateful.P50, b.Spikes.PlannedStateful.P50)
			add("planned stateful spike p99 (ms)", a.Spikes.PlannedStateful.P99, b.Spikes.PlannedStateful.P99)
		}
		add("time to balanced (ms)", a.TimeToBalancedMS, b.TimeToBalancedMS)
	}
	return out
}

// writeSizes writes each size's table, then the ratios.
func writeSizes(w io.Writer, r sizedResults) error {
	for _, z := range r.Sizes {
		fmt.Fprintf(w, "\n== size %s\n\n", z.Size)
		if err := writeTable(w, z.Results); err != nil {
			return err
		}
	}
	first, last := r.Sizes[0].Size, r.Sizes[len(r.Sizes)-1].Size
	fmt.Fprintf(w, "\nSizes compared in this run: %s against %s (last / first)\n", last, first)
	for _, x := range r.Ratios {
		fmt.Fprintf(w, "  %-7s %-34s %9.1f vs %9.1f  %.2f×\n", x.Mode, x.Figure, x.Last, x.First, x.Ratio)
	}
	return nil
}

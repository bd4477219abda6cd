package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBench runs a tiny bench end to end in every mode and checks the
// structure of its output, that the counts are exact, and that the warm
// modes' moves paused for no restore. It asserts no wall-clock figure.
func TestBench(t *testing.T) {
	if testing.Short() {
		t.Skip("runs groups of agents")
	}
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	e := Env{Stdout: &out, Stderr: &errOut}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"--scenario", "scale-up", "--from", "2", "--to", "3", "--tasks", "5", "--stateless-share", "0.2",
		"--keys", "300", "--value-size", "32", "--rate", "100", "--warmup", "300ms", "--hold", "200ms",
		"--acceptable-lag", "0", "--modes", "eager,stable,cold", "--json", "--out", dir}
	if err := Run(ctx, args, e); err != nil {
		t.Fatalf("handoff-lab bench: %v\nstderr:\n%s", err, errOut.String())
	}
	var res Results
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("--json output does not decode: %v\n%s", err, out.String())
	}
	if len(res.Runs) != 3 {
		t.Fatalf("%d runs, want 3 (eager, stable, cold)", len(res.Runs))
	}
	for _, run := range res.Runs {
		switch {
		case run.Mode == modeCold && !run.Available:
			if run.Unavailable == "" {
				t.Errorf("cold is unavailable without a reason")
			}
			continue
		case !run.Available || run.Error != "":
			t.Errorf("%s: available %v, error %q", run.Mode, run.Available, run.Error)
			continue
		}
		if !run.Exact {
			t.Errorf("%s: counts not exact: %s", run.Mode, run.Check)
		}
		if !run.Balanced || run.Generations == 0 {
			t.Errorf("%s: balanced %v after %d generations, want balanced after some", run.Mode, run.Balanced, run.Generations)
		}
		if run.Pauses.PlannedStateful.Count == 0 || len(run.PauseLog) != run.Pauses.All.Count {
			t.Errorf("%s: %d planned stateful pauses, %d logged of %d; want some, all logged", run.Mode,
				run.Pauses.PlannedStateful.Count, len(run.PauseLog), run.Pauses.All.Count)
		}
		replayed := run.ReplayedByLearners.Records // warm modes warm up with learners,
		if run.Mode == modeCold {
			replayed = run.ReplayedByActivations.Records // cold restores in activations
		}
		if replayed == 0 || run.Ceiling.Messages == 0 || run.Restore.Records != 300 {
			t.Errorf("%s: replayed %d records, ceiling read %d messages, reference restored %d records; want some, some, 300",
				run.Mode, replayed, run.Ceiling.Messages, run.Restore.Records)
		}
		if run.Mode == modeEager || run.Mode == modeStable {
			// Warm modes: every planned move found its learner current
			// (the acceptable lag is 0). A move that the leader's
			// generation activates before the successor's tailer took it
			// over directly applies the release entry that handed it over
			// (one message, no records), and nothing else.
			moves := float64(run.Pauses.PlannedStateful.Count)
			if run.ActivationReplayedMetric > moves || run.ReplayedByActivations.Records != 0 {
				t.Errorf("%s: activations replayed %v messages (metric) over %v planned moves and %d records (reports), want at most one message a move and no records: a warm move paused for a restore",
					run.Mode, run.ActivationReplayedMetric, moves, run.ReplayedByActivations.Records)
			}
			// 100 msg/s over 5 tasks: the message after every stop comes
			// within a few hundred ms, so every move has its spike.
			if sp := run.Spikes.PlannedStateful; sp.Count == 0 || sp.Count > run.Pauses.PlannedStateful.Count || run.Spikes.Steady.P50 <= 0 {
				t.Errorf("%s: %d spikes measured over %d planned stateful moves, steady latency p50 %v ms; want one a move at most, some, and a steady latency",
					run.Mode, sp.Count, run.Pauses.PlannedStateful.Count, run.Spikes.Steady.P50)
			}
			if run.Pauses.Failover.Count != 0 {
				t.Errorf("%s: %d failover pauses in a scale-up", run.Mode, run.Pauses.Failover.Count)
			}
		}
		svg := filepath.Join(dir, "timeline-"+run.Mode+".svg")
		if run.Timeline != filepath.Base(svg) {
			t.Errorf("%s: timeline %q, want %q", run.Mode, run.Timeline, filepath.Base(svg))
		}
		checkSVG(t, svg)
	}
	if len(res.Figures) == 0 {
		t.Errorf("no figures")
	}
	for _, name := range []string{"results.json", "table.txt"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(b) == 0 {
			t.Errorf("--out wrote no %s: %v", name, err)
		}
	}
	table, _ := os.ReadFile(filepath.Join(dir, "table.txt"))
	for _, want := range []string{"time to balanced", "stateful pause p50 / p99 / max", "stateful spike p50 / p99 / max", "Figures: pauses", "cold unavailable"} {
		if !strings.Contains(string(table), want) && !(want == "cold unavailable" && res.Runs[2].Available) {
			t.Errorf("table.txt lacks %q:\n%s", want, table)
		}
	}
	if !strings.Contains(errOut.String(), "bench: done") {
		t.Errorf("no progress on stderr:\n%s", errOut.String())
	}
}

// checkSVG checks that path holds well-formed XML with an svg root.
func checkSVG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Errorf("%s is not well-formed XML: %v", path, err)
			return
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("%s has root <%s>, want <svg>", path, root)
	}
}

func TestParseBench(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantErr  bool
		from, to int
	}{
		{name: "defaults", from: 3, to: 4},
		{name: "scale-down", args: []string{"--scenario", "scale-down"}, from: 4, to: 3},
		{name: "scale-down 5 to 2", args: []string{"--scenario", "scale-down", "--from", "5", "--to", "2"}, from: 5, to: 2},
		{name: "crash", args: []string{"--scenario", "crash"}, from: 3, to: 2},
		{name: "rolling", args: []string{"--scenario", "rolling-restart", "--from", "4"}, from: 4, to: 4},
		{name: "scale-up that shrinks", args: []string{"--from", "3", "--to", "2"}, wantErr: true},
		{name: "unknown scenario", args: []string{"--scenario", "explode"}, wantErr: true},
		{name: "unknown mode", args: []string{"--modes", "eager,lazy"}, wantErr: true},
		{name: "all stateless", args: []string{"--stateless-share", "1"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parse(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parse(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			}
			if err == nil && (s.From != tt.from || s.To != tt.to) {
				t.Errorf("parse(%q) = %d→%d, want %d→%d", tt.args, s.From, s.To, tt.from, tt.to)
			}
		})
	}
}

func TestPauseStatsOf(t *testing.T) {
	ds := make([]time.Duration, 0, 100)
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	st := PauseStatsOf(ds)
	if st.Count != 100 || st.P50 != 50 || st.P99 != 99 || st.Max != 100 || st.Sum != 5050 {
		t.Errorf("PauseStatsOf(1..100 ms) = %+v, want count 100, p50 50, p99 99, max 100, sum 5050", st)
	}
	if st := PauseStatsOf(nil); st.Count != 0 || st.P99 != 0 {
		t.Errorf("PauseStatsOf(nil) = %+v, want zero", st)
	}
}

// TestParseSizes: --sizes names each size's members, and its tasks scale
// with the first size's members unless given.
func TestParseSizes(t *testing.T) {
	s, err := parse([]string{"--sizes", "3:4,32:33,16:17:100", "--tasks", "30"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []Size{{3, 4, 30}, {32, 33, 320}, {16, 17, 100}}
	if !slices.Equal(s.Sizes, want) || s.From != 3 || s.To != 4 || s.Tasks != 30 {
		t.Errorf("parse(--sizes 3:4,32:33,16:17:100 --tasks 30) = sizes %v, from %d to %d, tasks %d; want %v, 3, 4, 30", s.Sizes, s.From, s.To, s.Tasks, want)
	}
	for _, bad := range []string{"3:4", "3:4,0:1", "3:4,5", "3:4,a:b", "3:4,5:6:7:8"} {
		if _, err := parse([]string{"--sizes", bad}, io.Discard); err == nil {
			t.Errorf("parse(--sizes %s) accepted it", bad)
		}
	}
}

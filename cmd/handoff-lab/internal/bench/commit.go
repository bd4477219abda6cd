package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/lab"
)

// scenarioCommit measures the commit path through the HTTP API instead of
// a rebalance.
const scenarioCommit = "commit"

// Sizes of the commit scenario's records: a NATS-NOTES record.
const (
	commitKeySize   = 18
	commitValueSize = 100
)

// commitResults is what the commit scenario measured.
type commitResults struct {
	Settings Settings    `json:"settings"`
	Started  time.Time   `json:"started"`
	Load     [2]float64  `json:"loadAverage"`
	Runs     []commitRun `json:"runs"`
	Error    string      `json:"error,omitempty"`
}

// commitRun is one level of parallelism: Tasks workers, each committing
// to its own task, one commit at a time.
type commitRun struct {
	Tasks         int        `json:"tasks"`
	Commits       int        `json:"commits"`
	Records       int        `json:"records"`
	Seconds       float64    `json:"seconds"`
	RecordsPerSec float64    `json:"recordsPerSec"`
	CommitsPerSec float64    `json:"commitsPerSec"`
	Latency       PauseStats `json:"latency"` // per commit, ms
	Refused       int        `json:"refused"`
	FirstRefusal  string     `json:"firstRefusal,omitempty"`
	// CPUPerCommitUS is the CPU time each process spent per commit, in
	// µs: the agent, nats-server and this process (the client; everything
	// when the group runs in it).
	CPUPerCommitUS map[string]float64 `json:"cpuPerCommitUs,omitempty"`
	// CeilingRecordsPerSec is what the machine's cores could carry at that
	// CPU cost, were nothing else running: cores / CPU per commit.
	CeilingRecordsPerSec float64 `json:"ceilingRecordsPerSec,omitempty"`
}

// runCommit starts one member (agent and worker, with no input: the
// worker stays idle), then commits from this process through the member's
// HTTP API, as a worker would, at each level of --commit-tasks.
func runCommit(ctx context.Context, s Settings, procs *lab.Processes, e Env) error {
	res := commitResults{Settings: s, Started: time.Now().UTC()}
	res.Load[0] = loadAverage()
	err := measureCommits(ctx, s, procs, &res)
	res.Load[1] = loadAverage()
	if err != nil {
		res.Error = err.Error()
	}
	return report(s, e, res, func(w io.Writer) error { return writeCommitTable(w, res) }, err)
}

// report writes a measurement's results, res as JSON and its table by
// table, to --out and to stdout (the JSON with --json), and returns the
// measurement's error err, or else the first write's.
func report(s Settings, e Env, res any, table func(io.Writer) error, err error) error {
	if s.Out != "" {
		if werr := writeFile(filepath.Join(s.Out, "results.json"), func(w io.Writer) error { return writeJSON(w, res) }); werr != nil {
			return werr
		}
		if werr := writeFile(filepath.Join(s.Out, "table.txt"), table); werr != nil {
			return werr
		}
	}
	var werr error
	if s.JSON {
		werr = writeJSON(e.Stdout, res)
	} else {
		werr = table(e.Stdout)
	}
	if err != nil {
		return err
	}
	return werr
}

func measureCommits(ctx context.Context, s Settings, procs *lab.Processes, res *commitResults) (err error) {
	most := slices.Max(s.CommitTasks)
	cfg := assign.DefaultConfig()
	cfg.Stateful = []string{fmt.Sprintf("orders-0..%d", most-1)}
	l, err := lab.Open(ctx, lab.Options{Group: "bench-commit", NATSURL: s.NATS, Config: cfg, Keep: s.Keep,
		SampleEvery: s.Sample, Seed: s.Seed, AgentLevel: agentLevel(s), Processes: procs})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := l.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	ms, err := l.AddMembers(ctx, MemberID(1))
	if err != nil {
		return err
	}
	if _, err := l.WaitSteady(ctx, s.Hold, OwnedBy([]string{MemberID(1)})); err != nil {
		return fmt.Errorf("tasks active: %w", err)
	}
	cl := client.New(ms[0].URL())
	view, err := cl.Assignment(ctx, 0, 0)
	if err != nil {
		return err
	}
	epochs := map[string]uint64{}
	for _, t := range view.Tasks {
		epochs[t.ID] = t.Epoch
	}
	puts := make([]api.KV, s.CommitRecords)
	for i := range puts {
		key := fmt.Sprintf("key-%0*d", commitKeySize-4, i)
		puts[i] = api.KV{Key: []byte(key), Value: make([]byte, commitValueSize)}
	}
	pids := map[string]int{"client": os.Getpid()}
	if p := ms[0].AgentPid(); p > 0 {
		pids["agent"] = p
	}
	if p := l.NATSPid(); p > 0 {
		pids["nats-server"] = p
	}
	for _, n := range s.CommitTasks {
		before := cpuTimes(pids)
		run := commitLoad(ctx, cl, n, epochs, puts, s.CommitDuration)
		run.CPUPerCommitUS = map[string]float64{}
		var total float64
		for name, t := range cpuTimes(pids) {
			if b, ok := before[name]; ok && run.Commits > 0 {
				us := float64(t-b) / float64(time.Microsecond) / float64(run.Commits)
				run.CPUPerCommitUS[name] = us
				total += us
			}
		}
		if total > 0 {
			run.CeilingRecordsPerSec = float64(runtime.NumCPU()) * 1e6 / total * float64(len(puts))
		}
		res.Runs = append(res.Runs, run)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// commitLoad runs n workers for d, each committing puts to its own task,
// one commit after the other. A commit under way when d ends is let finish:
// one cut off might land without its acknowledgement, and the next level's
// first commit to the task would be refused for it (409 resume).
func commitLoad(ctx context.Context, cl *client.Client, n int, epochs map[string]uint64, puts []api.KV, d time.Duration) commitRun {
	run := commitRun{Tasks: n}
	var (
		mu   sync.Mutex
		lats []time.Duration
		wg   sync.WaitGroup
	)
	t0 := time.Now()
	end := t0.Add(d)
	for w := 0; w < n; w++ {
		task := "orders-" + strconv.Itoa(w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			refused, first := 0, ""
			for i := 0; ctx.Err() == nil && time.Now().Before(end); i++ {
				req := api.CommitRequest{Puts: puts, Epoch: epochs[task], Checkpoint: []byte(strconv.Itoa(i))}
				c0 := time.Now()
				if _, err := cl.Commit(ctx, task, req); err != nil {
					if ctx.Err() == nil {
						refused++
						if first == "" {
							first = err.Error()
						}
						// Back off, so that a burst of refusals does not
						// spin: the figures count accepted commits only.
						select {
						case <-ctx.Done():
						case <-time.After(5 * time.Millisecond):
						}
					}
					continue
				}
				local = append(local, time.Since(c0))
			}
			mu.Lock()
			lats = append(lats, local...)
			run.Refused += refused
			if run.FirstRefusal == "" {
				run.FirstRefusal = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	run.Seconds = time.Since(t0).Seconds()
	run.Commits = len(lats)
	run.Records = run.Commits * len(puts)
	run.RecordsPerSec = float64(run.Records) / run.Seconds
	run.CommitsPerSec = float64(run.Commits) / run.Seconds
	run.Latency = PauseStatsOf(lats)
	return run
}

// writeCommitTable writes the commit scenario's results for people.
func writeCommitTable(w io.Writer, r commitResults) error {
	s := r.Settings
	layout := "in one process (agent, client and NATS share it)"
	if s.Processes {
		layout = "across processes (this process commits over HTTP to a handoff agent process on a nats-server process)"
	}
	fmt.Fprintf(w, "handoff-lab bench · commit through the HTTP API · %d records of %d+%d B per commit · %s\n",
		s.CommitRecords, commitKeySize, commitValueSize, layout)
	fmt.Fprintf(w, "started %s · %s per level · load average before / after %.1f / %.1f\n\n",
		r.Started.Format(time.RFC3339), s.CommitDuration, r.Load[0], r.Load[1])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tasks in parallel\trecords/s\tcommits/s\tlatency p50 / p99 / max\trefused\tCPU per commit\tceiling at that cost\t")
	for _, run := range r.Runs {
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.2f / %.2f / %.2f ms\t%d\t%s\t%s rec/s\t\n", run.Tasks, Count(run.RecordsPerSec), run.CommitsPerSec,
			run.Latency.P50, run.Latency.P99, run.Latency.Max, run.Refused, cpuCell(run.CPUPerCommitUS), Count(run.CeilingRecordsPerSec))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Error != "" {
		fmt.Fprintf(w, "\nfailed: %s\n", r.Error)
	}
	fmt.Fprintln(w, "\nHeadline figures against their targets")
	for _, run := range r.Runs {
		ok := run.RecordsPerSec >= 200_000 && run.Latency.P99 <= 5
		verdict := "✗"
		if ok {
			verdict = "✓"
		}
		fmt.Fprintf(w, "  commit through HTTP, %d task(s): %s records/s at p99 %.2f ms  %s target ≥ 200k records/s at p99 ≤ 5 ms\n",
			run.Tasks, Count(run.RecordsPerSec), run.Latency.P99, verdict)
	}
	return nil
}

// cpuTimes reads the CPU time of each named process.
func cpuTimes(pids map[string]int) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, pid := range pids {
		if t, ok := cpuTime(pid); ok {
			out[name] = t
		}
	}
	return out
}

// cpuCell prints CPU per commit by process, in a fixed order.
func cpuCell(us map[string]float64) string {
	var parts []string
	for _, name := range []string{"agent", "nats-server", "client"} {
		if v, ok := us[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.0f µs", name, v))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

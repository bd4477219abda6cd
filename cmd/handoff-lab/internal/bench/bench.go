// Package bench is 'handoff-lab bench': it runs one rebalance scenario (or the
// commit path) once per hand-off mode on a fresh internal/lab group, in
// this process or as processes, and reports what each mode cost (pauses,
// time to balanced, replay, throughput) as a table, JSON and SVG timelines.
// docs/bench.md explains each figure. It is a package of its own so that
// the agent's package main holds only the agent and the registration of
// each command; main passes in the outside world (Env).
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/internal/lab"
	"github.com/handoffhq/handoff/internal/proc"
)

// Env is what the bench may touch of the outside world: results go to
// Stdout, progress to Stderr.
type Env struct {
	Stdout, Stderr io.Writer
}

// Scenarios of the bench.
const (
	scenarioScaleUp   = "scale-up"
	scenarioScaleDown = "scale-down"
	scenarioCrash     = "crash"
	scenarioRolling   = "rolling-restart"
)

// Modes of the bench: the group's hand-off modes, and cold-sim.
const (
	modeEager   = "eager"
	modeStable  = "stable"
	modeCold    = "cold"
	modeColdSim = "cold-sim"
)

// workerMaxDelay is the bench's workers' commit delay: short, so that a
// new owner's first commit measures the hand-off more than the worker's
// batching (the counter's own default is countworker.DefaultMaxDelay).
const workerMaxDelay = 5 * time.Millisecond

// Settings are the bench's flags.
type Settings struct {
	Scenario       string        `json:"scenario"`
	From           int           `json:"from"`
	To             int           `json:"to"`
	Modes          []string      `json:"modes"`
	NATS           string        `json:"nats,omitempty"`
	Tasks          int           `json:"tasks"`
	StatelessPart  float64       `json:"statelessShare"`
	Keys           int           `json:"keys"`
	ValueSize      int           `json:"valueSize"`
	Rate           int           `json:"rate"`
	Standbys       int           `json:"standbys"`
	MaxLearners    int           `json:"maxLearnersPerMember"`
	AcceptableLag  uint64        `json:"acceptableLag"`
	Session        time.Duration `json:"-"`
	Warmup         time.Duration `json:"-"`
	Hold           time.Duration `json:"-"`
	Timeout        time.Duration `json:"-"`
	Sample         time.Duration `json:"-"`
	Seed           uint64        `json:"seed"`
	Processes      bool          `json:"processes"`
	WorkerMaxDelay time.Duration `json:"-"`
	Bin            string        `json:"-"`
	AgentEnv       []string      `json:"agentEnv,omitempty"`
	AgentLevel     string        `json:"agentLogLevel"`
	CommitTasks    []int         `json:"commitTasks,omitempty"`
	CommitRecords  int           `json:"commitRecords,omitempty"`
	CommitDuration time.Duration `json:"-"`
	commitTasks    string
	State          StateSettings `json:"state,omitzero"`
	Scale          ScaleSettings `json:"scale,omitzero"`
	Flood          FloodSettings `json:"flood,omitzero"`
	ServeFloor     string        `json:"-"`
	Keep           bool          `json:"-"`
	JSON           bool          `json:"-"`
	Out            string        `json:"-"`
	modes          string
	// Sizes are the group sizes of a run at several sizes (--sizes); nil
	// for one run at From and To.
	Sizes []Size `json:"sizes,omitempty"`
	sizes string
}

// MarshalJSON writes s with its durations as Go duration strings ("2s").
func (s Settings) MarshalJSON() ([]byte, error) {
	type plain Settings
	return json.Marshal(struct {
		plain
		Session string `json:"sessionTimeout"`
		Warmup  string `json:"warmup"`
		Hold    string `json:"hold"`
		Timeout string `json:"timeout"`
		Sample  string `json:"sampleEvery"`
		Delay   string `json:"workerMaxDelay"`
	}{plain(s), s.Session.String(), s.Warmup.String(), s.Hold.String(), s.Timeout.String(), s.Sample.String(), s.WorkerMaxDelay.String()})
}

// stateful and stateless split Tasks by StatelessPart.
func (s Settings) stateless() int { return int(float64(s.Tasks)*s.StatelessPart + 0.5) }
func (s Settings) stateful() int  { return s.Tasks - s.stateless() }

func flags(s *Settings, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&s.modes, "modes", "eager,stable,cold", "comma-separated modes to compare: eager, stable, cold (ownership moves at once, the new owner restores first), cold-sim (eager promoting learners at once: an approximation of cold)")
	fs.StringVar(&s.Scenario, "scenario", scenarioScaleUp, "scale-up, scale-down (leave), crash, rolling-restart, commit (the commit path through the HTTP API, no rebalance), state (reads, commits and a read-modify-write worker through the API, next to a bare net/http floor and to Pebble), scale (the control plane of groups of --members members, many agents in this process, each with its own NATS connections, on nats-server processes) or flood (a worker's calls while a separate process floods its agent's API with slow bodies; always processes)")
	stateFlags(fs, &s.State, &s.ServeFloor)
	scaleFlags(fs, &s.Scale)
	floodFlags(fs, &s.Flood)
	fs.StringVar(&s.commitTasks, "commit-tasks", "1,8", "commit scenario: comma-separated `counts` of tasks committing in parallel, one level after the other")
	fs.IntVar(&s.CommitRecords, "commit-records", 100, "commit scenario: records per commit (18 B keys, 100 B values)")
	fs.DurationVar(&s.CommitDuration, "commit-duration", 5*time.Second, "commit scenario: how long each level runs")
	fs.IntVar(&s.From, "from", 0, "members before the event (default: scale-up 3, scale-down 4, crash 3, rolling-restart 3)")
	fs.IntVar(&s.To, "to", 0, "members after the event (default: scale-up from+1, scale-down from-1)")
	fs.StringVar(&s.sizes, "sizes", "", "run the scenario at each of these group `sizes`, FROM:TO[:TASKS] separated by commas (3:4,32:33), and print the ratios of the last size's figures to the first's; TASKS defaults to --tasks scaled by FROM over the first FROM, so that every size has as many tasks per member")
	fs.StringVar(&s.NATS, "nats", "", "NATS `URL` to run on (each mode gets its own group); empty runs an embedded server")
	fs.IntVar(&s.Tasks, "tasks", 32, "tasks in the group")
	fs.Float64Var(&s.StatelessPart, "stateless-share", 0.25, "share of the tasks that are stateless, 0 to 1")
	fs.IntVar(&s.Keys, "keys", 25_000, "keys of state per stateful task, pre-loaded into the changelog before the run")
	fs.IntVar(&s.ValueSize, "value-size", 256, "bytes per value of the pre-loaded state")
	fs.IntVar(&s.Rate, "rate", 1000, "input messages per second over all tasks")
	fs.IntVar(&s.Standbys, "standbys", 0, "warm standbys per stateful task")
	fs.IntVar(&s.MaxLearners, "max-learners", 4, "most learners in flight per member (0: no bound)")
	fs.Uint64Var(&s.AcceptableLag, "acceptable-lag", 100, "changelog messages a learner may still be behind when promoted")
	fs.DurationVar(&s.Session, "session-timeout", assign.DefaultConfig().SessionTimeout.D(), "session timeout: how long a crashed member keeps its tasks (the group default)")
	fs.DurationVar(&s.Warmup, "warmup", 3*time.Second, "steady running before the event (the throughput baseline)")
	fs.DurationVar(&s.Hold, "hold", time.Second, "how long the group must stay steady to count as balanced")
	fs.DurationVar(&s.Timeout, "timeout", 5*time.Minute, "give up on a mode's run after this long")
	fs.DurationVar(&s.WorkerMaxDelay, "worker-max-delay", workerMaxDelay, "the counter workers' --max-delay: the longest a message read waits for its commit")
	fs.DurationVar(&s.Sample, "sample", 25*time.Millisecond, "how often every member's view is sampled")
	fs.Uint64Var(&s.Seed, "seed", 1, "seed of the history and the input (same seed, same data)")
	fs.BoolVar(&s.Processes, "processes", false, "run every member as a 'handoff agent' process with an examples/counter worker process, on a nats-server process (unless --nats); without it, everything runs in this process")
	fs.StringVar(&s.Bin, "bin", "", "with --processes: `DIR` holding the handoff, counter and nats-server binaries; empty builds them from this module (needs the go command)")
	fs.Func("agent-env", "with --processes: `NAME=VALUE` added to every agent's environment (repeatable), for A/B runs", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("%q: use NAME=VALUE", v)
		}
		s.AgentEnv = append(s.AgentEnv, v)
		return nil
	})
	fs.StringVar(&s.AgentLevel, "agent-log-level", "info", "the agents' log `level` (debug adds a line per HTTP request; it slows the agents)")
	fs.BoolVar(&s.Keep, "keep", false, "keep each run's data directory")
	fs.BoolVar(&s.JSON, "json", false, "print the results as JSON instead of a table")
	fs.StringVar(&s.Out, "out", "", "write results.json, table.txt and timeline-<mode>.svg into `DIR` (the scale scenario: scale.svg, and agents-<members>.log with every agent's log)")
	fs.Usage = func() {
		fmt.Fprint(out, `Usage: handoff-lab bench [flags]

Runs one scenario once per mode, each on a fresh group with the same
pre-loaded state and input, and measures: per-task pauses, task-seconds
unavailable, time to balanced, generations, what learners and activations
replayed, learner-seconds, the input's throughput dip, and the restore rate
next to the raw replay ceiling. The group runs in this process, or with
--processes as separate agent, worker and nats-server processes, which adds
a breakdown of each hand-off from the processes' logs. docs/bench.md
explains each figure.

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses and checks the bench's flags.
func parse(args []string, out io.Writer) (Settings, error) {
	var s Settings
	fs := flags(&s, out)
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected argument %q; bench takes only flags", fs.Arg(0))
	}
	for _, m := range strings.Split(s.modes, ",") {
		switch m = strings.TrimSpace(m); m {
		case modeEager, modeStable, modeCold, modeColdSim:
			s.Modes = append(s.Modes, m)
		case "":
		default:
			return s, fmt.Errorf("--modes: unknown mode %q; use eager, stable, cold or cold-sim", m)
		}
	}
	if _, err := zerolog.ParseLevel(s.AgentLevel); err != nil || s.AgentLevel == "" {
		return s, fmt.Errorf("--agent-log-level %q: use trace, debug, info, warn or error", s.AgentLevel)
	}
	if len(s.Modes) == 0 {
		return s, errors.New("--modes: name at least one mode")
	}
	if s.sizes != "" {
		if err := parseSizes(&s); err != nil {
			return s, err
		}
	}
	switch s.Scenario {
	case scenarioScaleUp:
		s.From = orDefault(s.From, 3)
		s.To = orDefault(s.To, s.From+1)
		if s.To <= s.From {
			return s, fmt.Errorf("--to %d: a scale-up ends with more members than --from %d", s.To, s.From)
		}
	case scenarioScaleDown:
		s.From = orDefault(s.From, 4)
		s.To = orDefault(s.To, s.From-1)
		if s.To >= s.From || s.To < 1 {
			return s, fmt.Errorf("--to %d: a scale-down ends with 1 to %d members", s.To, s.From-1)
		}
	case scenarioCrash:
		s.From = orDefault(s.From, 3)
		s.To = s.From - 1
		if s.From < 2 {
			return s, errors.New("--from: a crash needs at least 2 members")
		}
	case scenarioRolling:
		s.From = orDefault(s.From, 3)
		s.To = s.From
		if s.From < 2 {
			return s, errors.New("--from: a rolling restart needs at least 2 members")
		}
	case scenarioCommit:
		s.From, s.To = 1, 1
		for _, f := range strings.Split(s.commitTasks, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return s, fmt.Errorf("--commit-tasks %q: use counts of 1 or more, like 1,8", s.commitTasks)
			}
			s.CommitTasks = append(s.CommitTasks, n)
		}
		if s.CommitRecords < 1 || s.CommitDuration <= 0 {
			return s, errors.New("--commit-records must be 1 or more and --commit-duration positive")
		}
	case scenarioState:
		s.From, s.To = 1, 1
		if err := parseState(&s.State); err != nil {
			return s, err
		}
	case scenarioScale:
		if err := parseScale(&s.Scale); err != nil {
			return s, err
		}
		s.From, s.To = s.Scale.Members[0], s.Scale.Members[0]
		if s.Processes || len(s.Sizes) > 0 {
			return s, errors.New("--scenario scale runs its members in this process, at the sizes of --members: drop --processes and --sizes")
		}
	case scenarioFlood:
		s.From, s.To, s.Processes = 1, 1, true
		if err := parseFlood(&s.Flood); err != nil {
			return s, err
		}
	default:
		return s, fmt.Errorf("--scenario %q: use scale-up, scale-down, crash, rolling-restart, commit, state, scale or flood", s.Scenario)
	}
	switch {
	case s.Tasks < 1:
		return s, fmt.Errorf("--tasks %d: use at least 1", s.Tasks)
	case s.StatelessPart < 0 || s.StatelessPart > 1:
		return s, fmt.Errorf("--stateless-share %v: use a number from 0 to 1", s.StatelessPart)
	case s.stateful() < 1:
		return s, errors.New("--stateless-share leaves no stateful task: lower it")
	case s.Keys < 0 || s.ValueSize < 0:
		return s, errors.New("--keys and --value-size must be 0 or more")
	case s.Rate < 1:
		return s, fmt.Errorf("--rate %d: use at least 1 message per second", s.Rate)
	case s.Hold < 0 || s.Warmup < 0 || s.Timeout <= 0 || s.Sample <= 0 || s.WorkerMaxDelay <= 0:
		return s, errors.New("--warmup and --hold must be 0 or more; --timeout, --sample and --worker-max-delay positive")
	}
	return s, nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Run is 'handoff-lab bench args...': it runs the scenario in every mode and
// reports. It returns flag.ErrHelp after --help, and an error when a mode
// failed or ctx ended first (the runs done so far are reported either way).
func Run(ctx context.Context, args []string, e Env) error {
	s, err := parse(args, e.Stdout)
	if err != nil {
		return err
	}
	if s.ServeFloor != "" {
		return serveFloor(ctx, s.ServeFloor, e.Stdout)
	}
	if s.Out != "" {
		if err := os.MkdirAll(s.Out, 0o755); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	var procs *lab.Processes
	if s.Processes {
		if procs, err = binaries(s); err != nil {
			return err
		}
	} else if s.Bin != "" && s.Scenario != scenarioScale || len(s.AgentEnv) > 0 {
		return errors.New("--bin and --agent-env need --processes")
	}
	switch s.Scenario {
	case scenarioCommit:
		return runCommit(ctx, s, procs, e)
	case scenarioState:
		return runState(ctx, s, procs, e)
	case scenarioScale:
		return runScale(ctx, s, e)
	case scenarioFlood:
		return runFlood(ctx, s, procs, e)
	}
	if len(s.Sizes) > 0 {
		return runSizes(ctx, s, procs, e)
	}
	res, err := runModes(ctx, s, procs, newProgress(e.Stderr, len(s.Modes)), s.Out)
	if err != nil {
		return err
	}
	if s.JSON {
		err = writeJSON(e.Stdout, res)
	} else {
		err = writeTable(e.Stdout, res)
	}
	if err != nil {
		return err
	}
	return runErr(ctx, res)
}

// runModes runs the scenario of s once per mode and, with out, writes the
// results, table and timelines there.
func runModes(ctx context.Context, s Settings, procs *lab.Processes, prog *progress, out string) (Results, error) {
	res := Results{Settings: s, Started: time.Now().UTC()}
	for i, mode := range s.Modes {
		prog.startRun(i, mode)
		run, rec := runMode(ctx, s, mode, procs, prog)
		if rec != nil && out != "" && run.Available {
			name := "timeline-" + mode + ".svg"
			if err := writeFile(filepath.Join(out, name), func(w io.Writer) error { return writeTimelineSVG(w, s, run, rec) }); err != nil {
				return res, err
			}
			run.Timeline = name
		}
		res.Runs = append(res.Runs, run)
		if ctx.Err() != nil {
			break
		}
	}
	prog.done()
	res.Figures = figures(res)
	if out != "" {
		if err := writeFile(filepath.Join(out, "results.json"), func(w io.Writer) error { return writeJSON(w, res) }); err != nil {
			return res, err
		}
		if err := writeFile(filepath.Join(out, "table.txt"), func(w io.Writer) error { return writeTable(w, res) }); err != nil {
			return res, err
		}
	}
	return res, nil
}

// runErr is the error of a finished run: ctx ended, or a mode failed.
func runErr(ctx context.Context, res Results) error {
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	for _, r := range res.Runs {
		if r.Error != "" {
			return fmt.Errorf("mode %s: %s", r.Mode, r.Error)
		}
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeFile creates name and writes it with fn.
func writeFile(name string, fn func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// binaries finds the binaries of a bench of processes in --bin, or
// builds them.
func binaries(s Settings) (*lab.Processes, error) {
	if s.Bin == "" {
		b, err := proc.Build()
		if err != nil {
			return nil, fmt.Errorf("--processes: %w (or give --bin)", err)
		}
		return &lab.Processes{Binaries: b, AgentEnv: s.AgentEnv}, nil
	}
	b := proc.Binaries{
		Handoff:    filepath.Join(s.Bin, "handoff"),
		Lab:        filepath.Join(s.Bin, "handoff-lab"),
		Counter:    filepath.Join(s.Bin, "counter"),
		NATSServer: filepath.Join(s.Bin, "nats-server"),
	}
	for _, p := range []string{b.Handoff, b.Lab, b.Counter, b.NATSServer} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("--bin: %w (build them with: go build -o %s ./cmd/handoff ./cmd/handoff-lab ./examples/counter github.com/nats-io/nats-server/v2)", err, s.Bin)
		}
	}
	return &lab.Processes{Binaries: b, AgentEnv: s.AgentEnv}, nil
}

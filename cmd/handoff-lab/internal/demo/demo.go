// Package demo is 'handoff-lab demo': a group of in-process agents and counter
// workers on an embedded NATS server (internal/lab) scales up by one member
// and then loses one to a leave, shown live on the terminal, and ends with
// a report and an exact-count check. It is a package of its own so that the
// agent's package main holds only the agent and the registration of each
// command; main passes in the outside world (Env). It prints its figures
// as the bench does, with the bench's helpers.
package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/cmd/handoff-lab/internal/bench"
	"github.com/handoffhq/handoff/internal/lab"
)

// Env is what the demo may touch of the outside world: it prints to
// Stdout (redrawing the screen when Stdout is a terminal) and reads
// NO_COLOR through Getenv.
type Env struct {
	Stdout io.Writer
	Getenv func(string) string
}

// settings are the demo's flags.
type settings struct {
	tasks, stateless int
	rate             int
	members          int
	handover         string
	history          int
	valueSize        int
	hold             time.Duration
	timeout          time.Duration
	keep             bool
	workerCache      bool
	noColor, plain   bool
}

// parse parses and checks the demo's flags; --help prints to out.
// NO_COLOR (from getenv) turns colours off as --no-color does. Whether
// stdout is a terminal is decided later, by Run, which forces --plain
// and --no-color when it is not.
func parse(args []string, out io.Writer, getenv func(string) string) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&s.tasks, "tasks", 12, "stateful tasks")
	fs.IntVar(&s.stateless, "stateless", 4, "stateless tasks")
	fs.IntVar(&s.rate, "rate", 300, "input messages per second over all tasks")
	fs.IntVar(&s.members, "members", 3, "members before the scale-up")
	fs.StringVar(&s.handover, "handover", "eager", "hand-off mode: eager (each learner moves once caught up) or stable (a round at once)")
	fs.IntVar(&s.history, "history", 100_000, "records of state each stateful task has before the demo starts (what learners replay)")
	fs.IntVar(&s.valueSize, "value-size", 100, "bytes per value of that state")
	fs.DurationVar(&s.hold, "hold", 6*time.Second, "how long each phase runs once the group has settled")
	fs.DurationVar(&s.timeout, "timeout", 3*time.Minute, "give up if a phase does not settle within this long")
	fs.BoolVar(&s.keep, "keep", false, "keep the data directory (agents' log, NATS store, members' stores)")
	fs.BoolVar(&s.workerCache, "worker-cache", true, "the counter workers remember the counts they committed; --worker-cache=false keeps no state in them: every batch's counts are read from the sidecar (one batch get per commit)")
	fs.BoolVar(&s.noColor, "no-color", false, "no colours (also when NO_COLOR is set)")
	fs.BoolVar(&s.plain, "plain", false, "print progressive lines instead of redrawing the screen (the default when stdout is not a terminal)")
	fs.Usage = func() {
		fmt.Fprint(out, `Usage: handoff-lab demo [flags]

Starts a group of in-process agents and counter workers on an embedded NATS
server, feeds them input, scales the group up by one member and then makes
one member leave, while showing who owns what, the learners' progress and
every hand-off's pause. It ends with a report (the pauses, and how much the
moved tasks' events were delayed beyond their steady latency) and an
exact-count check of every task's state, replayed from the changelog, with
no acknowledged commit lost or acknowledged to a stale owner. Nothing to set
up; the data directory is removed at exit (--keep keeps it). Ctrl-C stops it
cleanly.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	switch {
	case fs.NArg() > 0:
		return s, fmt.Errorf("unexpected argument %q; demo takes only flags", fs.Arg(0))
	case s.tasks < 1:
		return s, fmt.Errorf("--tasks %d: use at least 1 stateful task", s.tasks)
	case s.stateless < 0:
		return s, fmt.Errorf("--stateless %d: use 0 or more", s.stateless)
	case s.members < 2:
		return s, fmt.Errorf("--members %d: use at least 2, so that one can leave after the scale-up", s.members)
	case s.rate < 1:
		return s, fmt.Errorf("--rate %d: use at least 1 message per second", s.rate)
	case s.handover != string(assign.Eager) && s.handover != string(assign.Stable):
		return s, fmt.Errorf("--handover %q: use eager or stable", s.handover)
	case s.history < 0 || s.valueSize < 0:
		return s, errors.New("--history and --value-size must be 0 or more")
	case s.hold < 0 || s.timeout <= 0:
		return s, errors.New("--hold must be 0 or more and --timeout positive")
	}
	if getenv("NO_COLOR") != "" {
		s.noColor = true
	}
	return s, nil
}

// Run is 'handoff-lab demo args...': set up, start, scale up, leave, report.
// The group is internal/lab's in-process one (embedded NATS, real agents,
// counter workers) in a temporary directory. An interrupt (ctx ends) is a clean
// exit, not an error: the lab is closed either way, and the directory
// removed unless --keep.
func Run(ctx context.Context, args []string, e Env) error {
	s, err := parse(args, e.Stdout, e.Getenv)
	if err != nil {
		return err
	}
	tty := false
	if f, ok := e.Stdout.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		tty = true
	}
	if !tty {
		s.plain, s.noColor = true, true
	}
	v := newView(e.Stdout, s, time.Now())

	cfg := assign.DefaultConfig()
	cfg.Stateful = []string{fmt.Sprintf("orders-0..%d", s.tasks-1)}
	if s.stateless > 0 {
		cfg.Stateless = []string{fmt.Sprintf("mail-0..%d", s.stateless-1)}
	}
	cfg.Handover = assign.Mode(s.handover)
	l, err := lab.Open(ctx, lab.Options{
		Group: "demo", Config: cfg, Keep: s.keep, Seed: 1, AgentLevel: zerolog.InfoLevel, OnNote: v.note, NoCache: !s.workerCache,
	})
	if err != nil {
		return err
	}
	d := &runner{s: s, l: l, view: v}
	runErr := d.run(ctx)
	v.stop()
	closeErr := l.Close()
	if s.keep {
		fmt.Fprintf(e.Stdout, "  data           kept in %s (agents' log: agents.log)\n", l.Dir())
	}
	if ctx.Err() != nil {
		fmt.Fprintln(e.Stdout, "demo: interrupted; every member, worker and server stopped")
		return nil
	}
	return errors.Join(runErr, closeErr)
}

// runner is one run of the demo.
type runner struct {
	s    settings
	l    *lab.Lab
	view *view
}

// run goes through the demo's phases and prints the report. Every phase
// waits for the group to settle (settle) before the next begins, and the
// report's figures count from the scale-up on: pauses, replays and
// learner-seconds are read from the recorder since the mark "scale up", and
// the activations' replay as the difference of the lab's counter around it.
// It fails if the final check does not find every count exact.
func (d *runner) run(ctx context.Context) error {
	s, l := d.s, d.l
	d.view.setPhase("setting up", fmt.Sprintf("embedded NATS at %s, data in %s", l.URL(), l.Dir()))
	hist, err := l.Preload(ctx, lab.History{Keys: s.history, ValueSize: s.valueSize})
	if err != nil {
		return err
	}
	if s.history > 0 {
		d.view.line("history: %d tasks × %d records (%s) written to the changelog in %s", hist.Tasks, s.history,
			bench.Bytes(float64(hist.Bytes)), hist.Took.Round(10*time.Millisecond))
	}
	d.view.start(ctx, l.Recorder())
	l.Input().Start(s.rate)

	ids := bench.MemberIDs(1, s.members)
	d.view.setPhase("starting", fmt.Sprintf("%s start; each restores its share of the history before it serves", strings.Join(ids, ", ")))
	if _, err := l.AddMembers(ctx, ids...); err != nil {
		return err
	}
	if err := d.settle(ctx, 0, bench.OwnedBy(ids)); err != nil {
		return err
	}
	steadyFrom := time.Now() // the steady latency of a task's events counts from here
	d.view.setPhase(fmt.Sprintf("running on %d members", s.members), "steady: every task has one owner and its worker runs")
	if !group.Sleep(ctx, s.hold) {
		return ctx.Err()
	}

	newcomer := bench.MemberID(s.members + 1)
	up := l.Recorder().Mark("scale up: " + newcomer + " joins")
	activationBefore, directBefore := l.ActivationReplayed(), l.DirectTakeovers()
	genBefore := l.Recorder().GenerationAt(up)
	d.view.setPhase("scale up", newcomer+" joins: learners warm its share up, then each task moves")
	if _, err := l.AddMember(ctx, newcomer); err != nil {
		return err
	}
	all := append(ids, newcomer)
	if err := d.settle(ctx, s.hold, bench.OwnedBy(all)); err != nil {
		return err
	}

	leaver := ids[0]
	l.Recorder().Mark(leaver + " leaves")
	d.view.setPhase("scale down", leaver+" leaves (POST /leave): its tasks are warmed on the others, then handed over")
	if err := l.Leave(ctx, leaver); err != nil {
		return err
	}
	stayers := all[1:]
	wctx, cancel := context.WithTimeout(ctx, s.timeout)
	err = l.WaitStopped(wctx, leaver)
	cancel()
	if err != nil {
		return err
	}
	if err := d.settle(ctx, s.hold, bench.OwnedBy(stayers)); err != nil {
		return err
	}

	d.view.setPhase("checking", "input stopped; workers commit the rest; every task's changelog is replayed")
	if err := l.Input().Stop(); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := l.Drain(cctx); err != nil {
		return err
	}
	check, err := l.Check(cctx, s.history)
	if err != nil {
		return err
	}
	d.view.stop()
	writeReport(d.view.w, report{
		settings:           s,
		elapsed:            time.Since(d.view.began),
		pauses:             l.Recorder().Pauses(up),
		spikes:             l.Spikes(steadyFrom),
		since:              up,
		replays:            l.Recorder().Replays(up),
		activationReplayed: l.ActivationReplayed() - activationBefore,
		direct:             l.DirectTakeovers() - directBefore,
		genFrom:            genBefore,
		genTo:              l.Recorder().Generation(),
		check:              check,
		learnerSeconds:     l.Recorder().RoleSeconds(lab.RoleLearner, up, time.Now()),
	})
	if !check.Exact {
		return errors.New("the counts are not exact: " + check.Summary())
	}
	return nil
}

// settle waits until the group is steady for hold and cond holds. Its
// deadline is --timeout plus hold, per phase, so a long --hold never
// counts against the time a phase has to settle.
func (d *runner) settle(ctx context.Context, hold time.Duration, cond func(lab.Snapshot) bool) error {
	ctx, cancel := context.WithTimeout(ctx, d.s.timeout+hold)
	defer cancel()
	_, err := d.l.WaitSteady(ctx, hold, cond)
	return err
}

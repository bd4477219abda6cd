package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/handoffhq/handoff/internal/conformance"
)

func init() {
	register("conformance", "check that a worker (any language) follows the worker's contract", runConformance)
}

// runConformance parses the command line, runs the cases and prints the
// report; the logic is in internal/conformance.
func runConformance(ctx context.Context, args []string, e *env) error {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(e.stdout)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	dir := fs.String("dir", "", "keep the run's data and logs in this `directory` (default: a temporary one, removed when every case passes)")
	tasks := fs.Int("tasks", conformance.DefaultTasks, "stateful tasks in the group (at least 4)")
	phase := fs.Duration("phase-timeout", conformance.DefaultPhaseWait, "how `long` each step may take, the worker's start-up included")
	quiet := fs.Bool("quiet", false, "print only the report, not the steps")
	job := fs.String("job", conformance.JobCount, "the `job` your worker does: count (the counting job, checked against exact counts) or own (a job of its own: the contract alone, from the calls)")
	unix := fs.Bool("unix", false, "the agent and the proxy listen on Unix sockets: the worker gets SIDECAR_URL=unix:PATH (as with an agent's --listen unix:PATH)")
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, `Usage: handoff conformance [flags] -- <command that starts a worker> [args]

Runs your worker against a real agent and checks, from the agent's side, that
it follows the worker's contract (docs/api.md). It starts an embedded NATS
server, a real agent, and your worker with these variables in its
environment:

  %-14s the agent's API (the same API as in production, through a
                 proxy that records every call and injects faults):
                 http://127.0.0.1:PORT, or with --unix unix:PATH, a Unix
                 socket to call as http://localhost
  %-14s the API token: send "Authorization: Bearer <token>"
  %-14s the run's NATS server: the counting job's input is there
                 (with --job own, your command may use it for its own)
  %-14s the group: task T's input is subject input.<group>.T of
                 stream INPUT_<group>
  %-14s the group's stateful tasks, as a range (c-0..3 for c-0 to c-3)

A second real member joins and leaves to make tasks move; its worker is a
second copy of your command, with the same variables for its own agent
(its calls are not judged). The proxy answers chosen calls with 503
unavailable, 409 resume and 409 not_owner, and leaves one commit unanswered
as a paused agent would. At the end the worker's member leaves and the
worker must exit on shutdown.

--job count (the default): the worker runs the counting job, the job of
examples/counter and examples/python: count how often each key (a message's
body) occurs in a task's input; commit the counts as decimal values under the
keys, with the input sequence of the last message counted as the checkpoint
(8 bytes, big-endian). The run publishes the input, and knowing the job lets
every commit be checked against the exact counts.

--job own: the worker runs its own job, unchanged. The run makes no input
and checks no state; your command brings its own input, or needs none, and
must commit on every task it is given while the run lasts (the faults are
injected on commits). The run judges the contract alone, from the calls:
start-from-checkpoint is skipped; release-revoked asks for no final commit;
restart-on-resume checks that /assignment is read before the next commit
instead of that commit's counts. A worker that checks its own state (and
exits non-zero when it finds it wrong) covers what the run cannot see.

The cases:

`, conformance.EnvSidecarURL, conformance.EnvSidecarToken, conformance.EnvNATSURL, conformance.EnvGroup, conformance.EnvTasks)
		for _, c := range conformance.Cases(conformance.JobCount) {
			fmt.Fprintf(e.stdout, "  %-22s %s\n", c.ID, c.Title)
		}
		fmt.Fprint(e.stdout, `
It prints a table with the reason for each failed (and skipped) case and
exits with status 1 if any case failed. A run takes 10 to 30 seconds.

Examples:
  handoff conformance -- python3 examples/python/worker.py
  handoff conformance -- bin/counter
  handoff conformance --unix -- bin/counter --cache=false
  handoff conformance --json -- ./my-worker --some-flag
  handoff conformance --job own -- ./my-worker     # a worker of another job

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("give the command that starts your worker after --")
	}
	opts := conformance.Options{Command: fs.Args(), Job: *job, Tasks: *tasks, PhaseWait: *phase, Dir: *dir, Socket: *unix}
	if !*quiet && !*asJSON {
		opts.Progress = e.stderr
	}
	rep, err := conformance.Run(ctx, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		err = rep.WriteJSON(e.stdout)
	} else {
		err = rep.WriteText(e.stdout)
	}
	if err != nil {
		return fmt.Errorf("print the report: %w", err)
	}
	if !rep.Passed {
		return fmt.Errorf("the worker failed %d conformance case(s): %v", len(rep.Failed()), rep.Failed())
	}
	return nil
}

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
  %-14s the NATS server holding the job's input
  %-14s the group: task T's input is subject input.<group>.T of
                 stream INPUT_<group>

The worker runs the conformance job, the job of examples/counter and
examples/python: count how often each key (a message's body) occurs in a
task's input; commit the counts as decimal values under the keys, with the
input sequence of the last message counted as the checkpoint (8 bytes,
big-endian). Knowing the job lets every commit be checked against the exact
counts.

A second real member joins and leaves to make tasks move, and the proxy
answers chosen calls with 503 unavailable, 409 resume and 409 not_owner, and
leaves one commit unanswered as a paused agent would. At the end the worker's
member leaves and the worker must exit on shutdown.
The cases:

`, conformance.EnvSidecarURL, conformance.EnvSidecarToken, conformance.EnvNATSURL, conformance.EnvGroup)
		for _, c := range conformance.Cases() {
			fmt.Fprintf(e.stdout, "  %-22s %s\n", c.ID, c.Title)
		}
		fmt.Fprint(e.stdout, `
It prints a table with the reason for each failed case and exits with status
1 if any case failed. A run takes 10 to 30 seconds.

Examples:
  handoff conformance -- python3 examples/python/worker.py
  handoff conformance -- bin/counter
  handoff conformance --unix -- bin/counter --cache=false
  handoff conformance --json -- ./my-worker --some-flag

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
	opts := conformance.Options{Command: fs.Args(), Tasks: *tasks, PhaseWait: *phase, Dir: *dir, Socket: *unix}
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

// Command handoff-lab runs whole handoff groups to show and measure them:
// 'handoff-lab demo' (a group on an embedded NATS server scales up and
// down, shown live), 'handoff-lab bench' (rebalance efficiency, the
// state path and the commit path, in process or across processes, and a
// worker's calls through a flood) and 'handoff-lab flood' (slow bodies
// sent to an agent's API, the flood the bench runs).
//
// It is a binary of its own, apart from the sidecar (cmd/handoff), so that
// the sidecar and its image link none of the lab: the in-process groups,
// the multi-process harness (which runs 'go build'), the run checks and the
// counter worker. main only handles signals and dispatch; each command lives
// in its package under internal/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/handoffhq/handoff/cmd/handoff-lab/internal/bench"
	"github.com/handoffhq/handoff/cmd/handoff-lab/internal/demo"
	"github.com/handoffhq/handoff/cmd/handoff-lab/internal/flood"
)

// command is one subcommand: a one-line summary and the function that runs it.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, e env) error
}

// env is what a subcommand may touch of the outside world.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// commands are the subcommands by name.
var commands = map[string]command{
	"bench": {"measure rebalance efficiency: pauses, time to balanced, replay, per hand-off mode", func(ctx context.Context, args []string, e env) error {
		return bench.Run(ctx, args, bench.Env{Stdout: e.stdout, Stderr: e.stderr})
	}},
	"demo": {"watch a group scale up and down without pausing tasks to rebuild state (no setup)", func(ctx context.Context, args []string, e env) error {
		return demo.Run(ctx, args, demo.Env{Stdout: e.stdout, Getenv: e.getenv})
	}},
	"flood": {"flood an agent's API with slow request bodies from this process, as a hostile neighbour would (to check its admission)", func(ctx context.Context, args []string, e env) error {
		return flood.Run(ctx, args, flood.Env{Stdout: e.stdout})
	}},
}

// main turns the first SIGINT or SIGTERM into the cancellation of the
// command's context (a group then stops in order) and a second one into an
// immediate exit with status 130. flag.ErrHelp is not a failure: --help
// exits 0.
func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel() // first signal: stop in order
		<-sigs
		fmt.Fprintln(os.Stderr, "handoff-lab: second signal, exiting at once")
		os.Exit(130)
	}()
	err := run(ctx, os.Args[1:], env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	cancel()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "handoff-lab:", err)
		os.Exit(1)
	}
}

// run dispatches args to a subcommand.
func run(ctx context.Context, args []string, e env) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(e.stdout)
		if len(args) == 0 {
			return errors.New("name a command")
		}
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		usage(e.stderr)
		return fmt.Errorf("unknown command %q", args[0])
	}
	return c.run(ctx, args[1:], e)
}

// usage prints the command list.
func usage(w io.Writer) {
	fmt.Fprint(w, `handoff-lab runs whole handoff groups to show and measure them: agents,
workers and NATS in this process, or as separate processes on this machine.
The sidecar itself is the 'handoff' binary.

Usage: handoff-lab <command> [flags]

Commands:
`)
	names := make([]string, 0, len(commands))
	width := 0
	for n := range commands {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s %s\n", width, n, commands[n].summary)
	}
	fmt.Fprint(w, "\nRun 'handoff-lab <command> --help' for a command's flags.\n")
}

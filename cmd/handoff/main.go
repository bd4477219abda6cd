// Command handoff is the sidecar agent of a stateful stream-processing group
// and the tools around it. main only handles signals and dispatch; each
// subcommand is registered by a file of its own. The agent's own commands
// live in this package; the commands that read a group from outside
// (internal/groupcli) live in a package of their own, given what they share
// with the agent by their file here. The demo and the bench are another
// binary, cmd/handoff-lab, so that this one links no lab.
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
)

// command is one subcommand: a one-line summary and the function that runs it.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, env *env) error
}

// env is what a subcommand may touch of the outside world.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// getenv reads HANDOFF_* settings; tests replace it.
	getenv func(string) string
}

// commands are the subcommands by name. Each file that implements one, or
// hands it to its package, registers it in its init function, so a command
// is added by adding a file; usage lists them sorted by name.
var commands = map[string]command{}

// register adds a subcommand; called from init functions of the files that
// implement them.
func register(name, summary string, run func(ctx context.Context, args []string, env *env) error) {
	commands[name] = command{summary: summary, run: run}
}

// main turns the first SIGINT or SIGTERM into the cancellation of every
// command's context (an agent then leaves and closes in order) and a
// second one into an immediate exit with status 130. flag.ErrHelp is not a
// failure: --help exits 0.
func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel() // first signal: shut down in order
		<-sigs
		fmt.Fprintln(os.Stderr, "handoff: second signal, exiting at once")
		os.Exit(130)
	}()
	err := run(ctx, os.Args[1:], &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	cancel()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "handoff:", err)
		os.Exit(1)
	}
}

// run dispatches args to a subcommand.
func run(ctx context.Context, args []string, e *env) error {
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

// usage prints the command list; run prints it to stdout for help or when
// no command is named, and to stderr for an unknown command.
func usage(w io.Writer) {
	fmt.Fprint(w, `handoff moves stateful stream-processing tasks between members without pausing
them to rebuild state: a task's next owner replays its changelog first.

Usage: handoff <command> [flags]

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
	fmt.Fprint(w, "\nRun 'handoff <command> --help' for a command's flags.\n")
}

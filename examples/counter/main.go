// Command counter is the example handoff worker: it counts how often each
// key occurs in its tasks' input and keeps the counts in the sidecar's
// state, exactly once, across hand-offs. Copy it as the shape of a worker.
//
// The logic lives in the public package countworker (the repository's
// countworker directory), whose doc describes the input, the checkpoint and
// the event log; this command parses flags, connects to NATS and runs it:
//
//	counter --sidecar http://127.0.0.1:7070 --nats nats://127.0.0.1:4222 --group demo [--events FILE|-]
//	counter --sidecar unix:/run/handoff/api.sock ...   # an agent on a Unix socket
//	counter --cache=false ...                          # keep no counts: one batch get per commit
//
// counter exits 0 once the sidecar says shutdown.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/countworker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "counter:", err)
		os.Exit(1)
	}
}

// config is counter's command line.
type config struct {
	sidecar     string
	token       string
	natsURL     string
	group       string
	inputStream string
	batch       int
	maxDelay    time.Duration
	pollWait    time.Duration
	events      string
	logLevel    string
	cache       bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("counter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.sidecar, "sidecar", envOr("SIDECAR_URL", "http://127.0.0.1:7070"), "the handoff agent's API, http://HOST:PORT or unix:PATH for its Unix socket (default $SIDECAR_URL if set)")
	fs.StringVar(&c.token, "token", os.Getenv("SIDECAR_TOKEN"), "the agent's API token (its --api-token), if it has one (default $SIDECAR_TOKEN)")
	fs.StringVar(&c.natsURL, "nats", envOr("NATS_URL", nats.DefaultURL), "NATS server with the input stream (default $NATS_URL if set)")
	fs.StringVar(&c.group, "group", envOr("HANDOFF_GROUP", "demo"), "the group's name; input subjects are input.<group>.<task> (default $HANDOFF_GROUP if set)")
	fs.StringVar(&c.inputStream, "input-stream", "", "the input stream (default INPUT_<group>)")
	fs.IntVar(&c.batch, "batch", countworker.DefaultBatch, "most messages per commit")
	fs.DurationVar(&c.maxDelay, "max-delay", countworker.DefaultMaxDelay, "longest time a read message waits for its commit")
	fs.DurationVar(&c.pollWait, "poll-wait", client.DefaultPollWait, "how long each long-poll of GET /assignment waits for a change")
	fs.BoolVar(&c.cache, "cache", true, "remember the counts this worker committed; --cache=false keeps none and reads every batch's counts from the sidecar with one batch get")
	fs.StringVar(&c.events, "events", "", "write JSON-line events to this file (- for stdout)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q; counter takes only flags", fs.Arg(0))
	}
	if !countworker.ValidGroup(c.group) {
		return c, fmt.Errorf("--group %q: use a name without dots, wildcards, spaces or slashes", c.group)
	}
	if c.inputStream == "" {
		c.inputStream = countworker.StreamName(c.group)
	}
	if c.batch < 1 {
		return c, fmt.Errorf("--batch %d: commit at least 1 message at a time", c.batch)
	}
	if c.pollWait <= 0 {
		return c, fmt.Errorf("--poll-wait %v: use a positive duration such as 30s", c.pollWait)
	}
	if c.maxDelay <= 0 {
		return c, fmt.Errorf("--max-delay %v: use a positive duration such as 50ms", c.maxDelay)
	}
	return c, nil
}

// envOr returns the environment variable name, or def if it is empty. The
// variables are the ones handoff conformance and the Kubernetes example
// give a worker.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// run is counter's main: it returns once the sidecar says shutdown (nil),
// when ctx ends (nil), or on a setup error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	level, err := zerolog.ParseLevel(cfg.logLevel)
	if err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", cfg.logLevel)
	}
	log := zerolog.New(stderr).Level(level).With().Timestamp().Str("group", cfg.group).Logger()

	events, closeEvents, err := openEvents(cfg.events, stdout)
	if err != nil {
		return err
	}
	defer closeEvents()

	nc, err := nats.Connect(cfg.natsURL, nats.Name("handoff-counter-"+cfg.group), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", cfg.natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("open JetStream: %w", err)
	}
	if err := countworker.EnsureStream(ctx, js, cfg.inputStream, cfg.group); err != nil {
		return err
	}
	log.Info().Str("sidecar", cfg.sidecar).Str("stream", cfg.inputStream).Msg("counter started")
	return countworker.Run(ctx, countworker.Options{
		Client:   client.New(cfg.sidecar, client.WithToken(cfg.token)),
		JS:       js,
		Group:    cfg.group,
		Stream:   cfg.inputStream,
		Batch:    cfg.batch,
		MaxDelay: cfg.maxDelay,
		NoCache:  !cfg.cache,
		PollWait: cfg.pollWait,
		Events:   events,
		Logger:   log,
	})
}

// openEvents opens the event log: none for "", stdout for "-", else the
// file (appended to).
func openEvents(path string, stdout io.Writer) (io.Writer, func(), error) {
	switch path {
	case "":
		return nil, func() {}, nil
	case "-":
		return stdout, func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open --events file: %w", err)
	}
	return f, func() { _ = f.Close() }, nil
}

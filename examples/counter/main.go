// Command counter is the example handoff worker: it counts how often each
// key occurs in its tasks' input and keeps the counts in the sidecar's
// state, exactly once, across hand-overs. Copy it as the shape of a worker.
//
// Input is a JetStream stream (--input-stream, default INPUT_<group>) with a
// subject per task, input.<group>.<task>; each message's body is one key.
// For every task active on its member, counter reads the task's subject
// from the checkpoint on, and every --batch messages or --max-delay commits
// {key: decimal count} for the keys it saw, with the stream sequence of the
// last message as the checkpoint (8 bytes, big-endian). A revoked task
// commits what it has and is released; a new owner resumes from the
// checkpoint. counter exits 0 once the sidecar says shutdown.
//
// # Events
//
// With --events FILE (or - for stdout) counter writes one JSON object per
// line for each step of a task's life, for test harnesses and demos. Every
// event has "t" (RFC 3339 time with nanoseconds) and "event"; the rest
// depends on the event:
//
//	{"event":"start",    "task","epoch","checkpoint"}              fn starts; checkpoint = input seq it resumes after
//	{"event":"commit",   "task","epoch","seq","checkpoint","records"} a commit was acknowledged: seq = changelog sequence,
//	                                                                  checkpoint = input seq reached, records = messages in it
//	{"event":"stop",     "task","epoch","checkpoint"}              the task stopped after its final commit, before its release
//	{"event":"release",  "task","epoch","seq"}                     the sidecar acknowledged the release; seq = last commit's
//	{"event":"refused",  "task","code"}                            the sidecar refused a commit (code "not_owner"): task dropped
//	{"event":"restart",  "task","epoch","error"}                   processing failed; the task restarts from its checkpoint
//	{"event":"shutdown"}                                            the sidecar said shutdown; counter exits
//
// The hand-off pause of a task is the next owner's "start" minus the
// previous owner's "release".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/client"
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
	events      string
	logLevel    string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("counter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.sidecar, "sidecar", "http://127.0.0.1:7070", "the handoff agent's API")
	fs.StringVar(&c.token, "token", "", "the agent's API token (its --api-token), if it has one")
	fs.StringVar(&c.natsURL, "nats", nats.DefaultURL, "NATS server with the input stream")
	fs.StringVar(&c.group, "group", "demo", "the group's name; input subjects are input.<group>.<task>")
	fs.StringVar(&c.inputStream, "input-stream", "", "the input stream (default INPUT_<group>)")
	fs.IntVar(&c.batch, "batch", 100, "most messages per commit")
	fs.DurationVar(&c.maxDelay, "max-delay", 50*time.Millisecond, "longest time a read message waits for its commit")
	fs.StringVar(&c.events, "events", "", "write JSON-line events to this file (- for stdout)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q; counter takes only flags", fs.Arg(0))
	}
	if c.group == "" || strings.ContainsAny(c.group, ".*> \t/\\") {
		return c, fmt.Errorf("--group %q: use a name without dots, wildcards, spaces or slashes", c.group)
	}
	if c.inputStream == "" {
		c.inputStream = "INPUT_" + c.group
	}
	if c.batch < 1 {
		return c, fmt.Errorf("--batch %d: commit at least 1 message at a time", c.batch)
	}
	if c.maxDelay <= 0 {
		return c, fmt.Errorf("--max-delay %v: use a positive duration such as 50ms", c.maxDelay)
	}
	return c, nil
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

	events, closeEvents, err := openEvents(cfg.events, stdout, log)
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
	if err := ensureStream(ctx, js, cfg.inputStream, cfg.group); err != nil {
		return err
	}

	w := &counter{
		js:       js,
		stream:   cfg.inputStream,
		group:    cfg.group,
		batch:    cfg.batch,
		maxDelay: cfg.maxDelay,
		events:   events,
		log:      log,
	}
	c := client.New(cfg.sidecar, client.WithToken(cfg.token))
	log.Info().Str("sidecar", cfg.sidecar).Str("stream", cfg.inputStream).Msg("counter started")
	return client.Run(ctx, c, w.process, client.RunOptions{Logger: log, OnEvent: w.onEvent})
}

// ensureStream creates the input stream unless it exists, so that the
// worker and the producer may start in any order. An existing stream is
// left as its producer configured it.
func ensureStream(ctx context.Context, js jetstream.JetStream, name, group string) error {
	_, err := js.Stream(ctx, name)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("look up input stream %s: %w", name, err)
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     name,
		Subjects: []string{"input." + group + ".>"},
		Storage:  jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("create input stream %s: %w", name, err)
	}
	return nil
}

// openEvents opens the event log: none for "", stdout for "-", else the
// file (appended to).
func openEvents(path string, stdout io.Writer, log zerolog.Logger) (*eventLog, func(), error) {
	switch path {
	case "":
		return &eventLog{}, func() {}, nil
	case "-":
		return &eventLog{w: stdout, log: log}, func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open --events file: %w", err)
	}
	return &eventLog{w: f, log: log}, func() { _ = f.Close() }, nil
}

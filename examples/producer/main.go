// Command producer feeds the example counter worker and checks its result.
//
//	producer [flags]         publish keys to every task's input subject until interrupted
//	producer verify [flags]  check that the counts in the changelog equal the input exactly
//
// Input goes to the stream INPUT_<group>, one subject per task
// (input.<group>.<task>), one key per message, as examples/counter reads it.
// A publish that fails (NATS restarting, a timeout) is tried again, with a
// wait that grows to 5 s, until it is acknowledged, and each failure and
// the recovery are logged to stderr: the producer rides out a NATS restart.
// verify replays each stateful task's changelog, reads the input stream up to
// the task's checkpoint, and compares the counts key by key; it waits (up to
// --timeout) for the workers to finish the input first. The comparison is
// the one every harness of this repository makes (internal/record's
// CheckTask: one chain of owners, the counts, the checkpoint), so verify
// builds inside this module; a copy elsewhere keeps the producer and
// compares the counts itself (changelog.ReadTask and changelog.Replay are
// public).
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/record"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
}

type config struct {
	natsURL string
	group   string
	tasks   string
	rate    int
	keys    int
	timeout time.Duration
}

// run runs the producer or verify; out gets their report, logs what went
// wrong and was retried.
func run(ctx context.Context, args []string, out, logs io.Writer) error {
	verify := len(args) > 0 && args[0] == "verify"
	if verify {
		args = args[1:]
	}
	var c config
	fs := flag.NewFlagSet("producer", flag.ContinueOnError)
	fs.StringVar(&c.natsURL, "nats", "nats://127.0.0.1:4222", "NATS `URL`")
	fs.StringVar(&c.group, "group", "default", "`group` whose tasks to feed")
	fs.StringVar(&c.tasks, "tasks", "", "stateful task `IDs`, as given to 'handoff agent --tasks'")
	fs.IntVar(&c.rate, "rate", 200, "messages per second over all tasks")
	fs.IntVar(&c.keys, "keys", 20, "distinct keys per task")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "verify: how long to wait for the workers to finish the input")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tasks, err := assign.ExpandSpec(c.tasks)
	if err != nil || len(tasks) == 0 {
		return fmt.Errorf("--tasks: give the stateful task IDs, e.g. 'orders-0..7' (%v)", err)
	}
	// Reconnect for ever: the producer rides out a NATS restart.
	nc, err := nats.Connect(c.natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", c.natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if verify {
		return runVerify(ctx, js, c, tasks, out)
	}
	return produce(ctx, js, c, tasks, out, logs)
}

func inputStream(group string) string { return "INPUT_" + group }

// Bounds of the wait between two tries of a publish that failed, and of
// one try.
const (
	minRetryWait = 100 * time.Millisecond
	maxRetryWait = 5 * time.Second
	publishWait  = 5 * time.Second
)

// produce publishes random keys round-robin over the tasks at c.rate until
// ctx ends. A publish that fails (NATS restarting, a timeout) is tried
// again, with a wait that doubles up to maxRetryWait, until it is
// acknowledged; each failure is logged, and so is the recovery.
func produce(ctx context.Context, js jetstream.JetStream, c config, tasks []string, out, logs io.Writer) error {
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: inputStream(c.group), Subjects: []string{"input." + c.group + ".>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		return fmt.Errorf("create input stream: %w", err)
	}
	every := time.Second / time.Duration(max(c.rate, 1))
	tick := time.NewTicker(every)
	defer tick.Stop()
	report := time.NewTicker(5 * time.Second)
	defer report.Stop()
	var sent uint64
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			fmt.Fprintf(out, "published %d messages\n", sent)
			return nil
		case <-report.C:
			fmt.Fprintf(out, "published %d messages\n", sent)
		case <-tick.C:
			task := tasks[i%len(tasks)]
			key := "key-" + strconv.Itoa(rand.IntN(c.keys))
			if publish(ctx, js, "input."+c.group+"."+task, []byte(key), logs) {
				sent++
			}
		}
	}
}

// publish publishes data to subject, trying again after each failure until
// it is acknowledged (true) or ctx ends (false). A retried message whose
// first try was stored after all is in the input twice; verify counts the
// input as it is.
func publish(ctx context.Context, js jetstream.JetStream, subject string, data []byte, logs io.Writer) bool {
	wait, failed, since := minRetryWait, 0, time.Time{}
	for {
		pctx, cancel := context.WithTimeout(ctx, publishWait)
		_, err := js.Publish(pctx, subject, data)
		cancel()
		if err == nil {
			if failed > 0 {
				fmt.Fprintf(logs, "publishing again: %s acknowledged after %d failed tries in %s\n", subject, failed, time.Since(since).Round(time.Millisecond))
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if failed == 0 {
			since = time.Now()
		}
		failed++
		fmt.Fprintf(logs, "publish to %s failed (%v); trying again in %s\n", subject, err, wait)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = min(2*wait, maxRetryWait)
	}
}

// runVerify compares every task's replayed counts with its input.
func runVerify(ctx context.Context, js jetstream.JetStream, c config, tasks []string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	stream, err := js.Stream(ctx, inputStream(c.group))
	if err != nil {
		return fmt.Errorf("input stream: %w", err)
	}
	bad := 0
	for _, task := range tasks {
		subject := "input." + c.group + "." + task
		var last uint64
		if m, err := stream.GetLastMsgForSubject(ctx, subject); err == nil {
			last = m.Sequence
		} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("input of %s: %w", task, err)
		}
		recs, err := waitCaughtUp(ctx, js, c.group, task, last)
		if err != nil {
			return err
		}
		want, err := countInput(ctx, stream, subject, last)
		if err != nil {
			return err
		}
		tc := record.CheckTask(task, recs, nil, record.Want{Counts: want, End: last, HistoryKeys: 0})
		if !tc.Exact {
			bad++
			ps := tc.Problems()
			fmt.Fprintf(out, "%-12s MISMATCH (%d problems)\n", task, len(ps))
			for _, p := range ps[:min(3, len(ps))] {
				fmt.Fprintf(out, "  %s: %s\n", task, p)
			}
			continue
		}
		fmt.Fprintf(out, "%-12s ok: %d keys, input up to seq %d counted exactly once\n", task, len(want), last)
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d tasks have wrong counts", bad, len(tasks))
	}
	fmt.Fprintf(out, "all %d tasks exact\n", len(tasks))
	return nil
}

// waitCaughtUp reads a task's changelog until its replayed checkpoint
// reaches the input's last sequence.
func waitCaughtUp(ctx context.Context, js jetstream.JetStream, group, task string, last uint64) ([]changelog.Record, error) {
	for {
		recs, err := changelog.ReadTask(ctx, js, group, task)
		if err != nil {
			return nil, err
		}
		st := changelog.Replay(recs)
		var cp uint64
		if len(st.Checkpoint) == 8 {
			cp = binary.BigEndian.Uint64(st.Checkpoint)
		}
		if cp >= last {
			return recs, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: the workers reached input seq %d of %d before the timeout; are they running?", task, cp, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// countInput counts the keys of a subject up to seq last.
func countInput(ctx context.Context, stream jetstream.Stream, subject string, last uint64) (map[string]uint64, error) {
	counts := map[string]uint64{}
	if last == 0 {
		return counts, nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, err
	}
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			counts[string(m.Data())]++
			if md.Sequence.Stream >= last {
				return counts, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
	}
}

// Package lab runs a whole handoff group for `handoff-lab demo` and `handoff
// bench`, inside this process or as processes (Options.Processes): NATS
// (an embedded server, or one at a given URL), members that each have
// their own agent, Pebble store, NATS connections, worker HTTP API on
// 127.0.0.1:0 and counter worker
// (package countworker), an input generator whose exact counts are
// known, a pre-loaded changelog history, operations on members (add, leave
// through the HTTP API, crash, restart keeping the data dir), a recorder of
// every member's roles and every worker's events, and the final checks of
// internal/record.
//
// Its members run on internal/cluster (cluster.Local in this process,
// cluster.Process as processes), as the scenarios' and the agent tests' do;
// what the lab adds is what the demo and the bench need of a group: a
// recorder that samples every member's view every few milliseconds, the
// pauses, replays and breakdowns read from it, and the proof that counts
// came out exact. Every member's times come from one clock, the machine's,
// so a hand-off pause is the difference of two timestamps of the same
// clock. Nothing here is for production.
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/countworker"
	"github.com/handoffhq/handoff/internal/cluster"
	"github.com/handoffhq/handoff/internal/natsembed"
	"github.com/handoffhq/handoff/internal/proc"
	"github.com/handoffhq/handoff/internal/record"
	"github.com/handoffhq/handoff/internal/redact"
)

// Defaults of Options.
const (
	DefaultGroup       = "lab"
	DefaultSampleEvery = 25 * time.Millisecond
)

// Options configure a Lab.
type Options struct {
	// Group names the group; DefaultGroup if empty. On a shared NATS
	// server, give each lab its own group.
	Group string
	// Dir holds the members' data, the embedded server's store and the
	// agents' log. Empty makes a temporary directory that Close removes
	// unless Keep is set; a given Dir is never removed.
	Dir  string
	Keep bool
	// NATSURL is the NATS server to use; empty runs an embedded one on
	// 127.0.0.1 on a free port. On a server of its own, Close deletes the
	// group's streams and bucket unless Keep is set.
	NATSURL string
	// Config is the group's config: tasks, hand-off mode, timeouts. Open
	// validates it.
	Config assign.Config
	// Batch, MaxDelay and NoCache are the counter workers'
	// (countworker.Options).
	Batch    int
	MaxDelay time.Duration
	NoCache  bool
	// SampleEvery is how often the recorder samples every member's view;
	// DefaultSampleEvery if zero.
	SampleEvery time.Duration
	// AgentLog receives the agents' and servers' logs (JSON lines); nil
	// means the file agents.log in Dir. AgentLevel is their level
	// (zerolog's zero value is debug: set it).
	AgentLog   io.Writer
	AgentLevel zerolog.Level
	// OnNote, if set, is called with what happens, as it happens (members
	// joining, learners warming, tasks moving). It is called with the
	// recorder's lock held: it must return quickly and not call the Lab.
	OnNote func(Note)
	// Seed makes the input and the history reproducible.
	Seed uint64
	// Processes, if set, runs every member as an agent process and a
	// worker process, on a nats-server process unless NATSURL is set.
	Processes *Processes
	// Socket makes every member's API listen on a Unix socket in the
	// member's directory (api.sock) instead of a loopback port; its
	// worker and the lab call it there.
	Socket bool
}

// Lab is a running in-process group. Its methods are safe for concurrent
// use. Close it.
type Lab struct {
	opts    Options
	dir     string
	tempDir bool
	logFile *os.File
	log     zerolog.Logger

	srv      *natsembed.Server
	natsProc *proc.NATSServer       // the nats-server process of a lab of processes
	procs    *cluster.ProcessConfig // how its members run, in a lab of processes
	url      string
	nc       *nats.Conn // the lab's own connection: input, history, recorder, checks
	js       jetstream.JetStream

	rec   *Recorder
	input *record.Generator

	group *cluster.Group // the group's state in NATS

	dumped atomic.Bool // a slow agent's stacks were written
	readMu sync.Mutex  // one reader of the processes' logs at a time

	mu      sync.Mutex
	members map[string]*Member
	closed  bool

	stopBG context.CancelFunc
	bg     sync.WaitGroup
}

// Open starts NATS (unless Options.NATSURL is set), the input stream, the
// changelog stream and the recorder. It starts no member.
func Open(ctx context.Context, opts Options) (_ *Lab, err error) {
	if opts.Group == "" {
		opts.Group = DefaultGroup
	}
	if opts.SampleEvery <= 0 {
		opts.SampleEvery = DefaultSampleEvery
	}
	if !changelog.ValidGroup(opts.Group) || !countworker.ValidGroup(opts.Group) {
		return nil, fmt.Errorf("lab: group %q: use 1 to 64 letters, digits, '-' or '_'", opts.Group)
	}
	if err := opts.Config.Validate(); err != nil {
		return nil, fmt.Errorf("lab: group config: %w", err)
	}
	l := &Lab{opts: opts, members: map[string]*Member{}}
	defer func() {
		if err != nil {
			l.closeResources()
		}
	}()
	if err := l.openDir(); err != nil {
		return nil, err
	}
	if err := l.openNATS(); err != nil {
		return nil, err
	}
	if opts.Processes != nil {
		l.procs = l.processConfig()
	}
	if err := countworker.EnsureStream(ctx, l.js, countworker.StreamName(opts.Group), opts.Group); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if _, err := changelog.Open(ctx, l.js, changelog.Options{Group: opts.Group}); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	tasks, _ := opts.Config.Tasks() // validated above
	l.rec = newRecorder(tasks, opts.OnNote)
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	l.input = record.NewGenerator(l.js, record.GeneratorOptions{Group: opts.Group, Tasks: ids, Seed: opts.Seed})

	bgCtx, stop := context.WithCancel(context.Background())
	l.stopBG = stop
	stopProgress, err := group.WatchProgress(l.nc, opts.Group, func(p group.Progress) { l.rec.progress(p.LearnerProgress) })
	if err != nil {
		stop()
		return nil, fmt.Errorf("lab: %w", err)
	}
	l.bg.Add(2)
	go func() {
		defer l.bg.Done()
		<-bgCtx.Done()
		stopProgress()
	}()
	go func() {
		defer l.bg.Done()
		l.runSampler(bgCtx)
	}()
	return l, nil
}

func (l *Lab) openDir() error {
	l.dir = l.opts.Dir
	if l.dir == "" {
		d, err := os.MkdirTemp("", "handoff-lab-")
		if err != nil {
			return fmt.Errorf("lab: make a data directory: %w", err)
		}
		l.dir, l.tempDir = d, true
	} else if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return fmt.Errorf("lab: data directory: %w", err)
	}
	w := l.opts.AgentLog
	if w == nil {
		f, err := os.Create(filepath.Join(l.dir, "agents.log"))
		if err != nil {
			return fmt.Errorf("lab: agents' log: %w", err)
		}
		l.logFile, w = f, f
	}
	// zerolog's own timestamps have whole seconds unless main changes a
	// global: stamp each line with nanoseconds instead.
	l.log = zerolog.New(w).Level(l.opts.AgentLevel).Hook(zerolog.HookFunc(func(e *zerolog.Event, _ zerolog.Level, _ string) {
		e.Str("time", time.Now().UTC().Format(time.RFC3339Nano))
	}))
	return nil
}

func (l *Lab) openNATS() error {
	l.url = l.opts.NATSURL
	if l.url == "" && l.opts.Processes != nil {
		if err := l.startNATSProcess(); err != nil {
			return err
		}
	} else if l.url == "" {
		srv, err := natsembed.Start(natsembed.Options{
			DataDir: filepath.Join(l.dir, "nats"),
			Listen:  "127.0.0.1:0",
			// The server's notices (slow consumers, stalled producers) come
			// at debug level: keep them whatever the agents' level.
			Logger: l.log.Level(min(l.opts.AgentLevel, zerolog.DebugLevel)).With().Str("component", "nats").Logger(),
		})
		if err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		l.srv, l.url = srv, srv.ClientURL()
	}
	nc, err := l.connect("handoff-lab")
	if err != nil {
		return err
	}
	l.nc = nc
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return fmt.Errorf("lab: jetstream: %w", err)
	}
	l.js = js
	l.group = &cluster.Group{JS: js, Name: l.opts.Group}
	return nil
}

// connect opens a connection to the lab's NATS that reconnects forever.
func (l *Lab) connect(name string) (*nats.Conn, error) {
	log := l.log.With().Str("connection", name).Logger()
	nc, err := nats.Connect(l.url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		// nats.go prints asynchronous errors to stderr by default: keep
		// them with the agents' log, off the demo's screen.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Warn().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats")
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("disconnected from NATS")
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info().Msg("reconnected to NATS") }))
	if err != nil {
		// nats.go's errors may quote the URL, password included.
		return nil, redact.New(redact.URLSecrets(l.url)...).Error(fmt.Errorf("lab: connect to NATS at %s: %w", redact.URL(l.url), err))
	}
	return nc, nil
}

// dumpStacks writes every goroutine's stack to slow-<member>.stacks in the
// data directory, the first time an agent is slow to answer.
func (l *Lab) dumpStacks(member string) {
	if l.dumped.Swap(true) {
		return
	}
	name := filepath.Join(l.dir, "slow-"+member+".stacks")
	f, err := os.Create(name)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup("goroutine").WriteTo(f, 2)
	l.log.Warn().Str("member", member).Str("stacks", name).Msg("an agent took over 250ms to give its view; every goroutine's stack is in the file")
}

// Dir is the lab's data directory.
func (l *Lab) Dir() string { return l.dir }

// URL is the NATS server's client URL.
func (l *Lab) URL() string { return l.url }

// Group is the group's name.
func (l *Lab) Group() string { return l.opts.Group }

// Config is the group's config.
func (l *Lab) Config() assign.Config { return l.opts.Config }

// JetStream is the lab's own JetStream context.
func (l *Lab) JetStream() jetstream.JetStream { return l.js }

// Recorder is what the lab records.
func (l *Lab) Recorder() *Recorder { return l.rec }

// Input is the input generator.
func (l *Lab) Input() *record.Generator { return l.input }

// Close stops the input, every member (workers first, so that their last
// commits land; then agents, APIs, stores and connections), the recorder
// and NATS, and removes a temporary data directory unless Options.Keep is
// set. It is safe to call more than once.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	ms := l.sortedMembersLocked()
	l.mu.Unlock()

	l.input.Stop()
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.stop()
		}()
	}
	wg.Wait()
	return errors.Join(append(errs, l.closeResources())...)
}

// closeResources stops the background goroutines, NATS and the log, and
// removes what should not outlive the lab.
func (l *Lab) closeResources() error {
	if l.stopBG != nil {
		l.stopBG()
		l.bg.Wait()
	}
	var errs []error
	if l.srv == nil && l.natsProc == nil && l.nc != nil && !l.opts.Keep {
		errs = append(errs, l.deleteGroupStreams())
	}
	if l.nc != nil {
		l.nc.Close()
	}
	if l.srv != nil {
		l.srv.Shutdown()
	}
	if l.natsProc != nil {
		errs = append(errs, l.natsProc.Proc.Kill())
	}
	if l.logFile != nil {
		_ = l.logFile.Close()
	}
	if l.tempDir && !l.opts.Keep && l.dir != "" {
		if err := os.RemoveAll(l.dir); err != nil {
			errs = append(errs, fmt.Errorf("lab: remove %s: %w", l.dir, err))
		}
	}
	return errors.Join(errs...)
}

// deleteGroupStreams removes the group's streams from a shared server: the
// input, the changelog, the KV bucket, and any object store the agents made
// for the group (snapshots).
func (l *Lab) deleteGroupStreams() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g := l.opts.Group
	ours := func(name string) bool {
		return name == countworker.StreamName(g) || name == changelog.StreamName(g) ||
			name == "KV_"+group.BucketName(g) || strings.HasPrefix(name, "OBJ_"+group.BucketName(g)+"_")
	}
	var errs []error
	names := l.js.StreamNames(ctx)
	var doomed []string
	for name := range names.Name() {
		if ours(name) {
			doomed = append(doomed, name)
		}
	}
	if err := names.Err(); err != nil {
		errs = append(errs, fmt.Errorf("lab: list streams: %w", err))
	}
	for _, name := range doomed {
		if err := l.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("lab: delete stream %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (l *Lab) sortedMembersLocked() []*Member {
	ms := make([]*Member, 0, len(l.members))
	for _, m := range l.members {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return memberLess(ms[i].ID, ms[j].ID) })
	return ms
}

// memberLess orders member IDs naturally: m2 before m10.
func memberLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// Package conformance checks that a worker of any language follows the
// worker's contract of the handoff agent (docs/api.md), from the agent's
// side. It runs a real group on an embedded NATS server: a real agent whose
// API the worker reaches through a recording, fault-injecting proxy, and a
// second real member, with a second copy of the worker, that joins and
// leaves to make tasks move. It drives the worker through joins, revokes,
// injected 503, 409 not_owner and 409 resume answers and a final leave, and
// then judges each case from what the proxy recorded.
//
// The job is the counting job (JobCount) unless the run is told the worker
// does a job of its own (JobOwn). The counting job is the counter of
// examples/counter and examples/python: count how often each key occurs in
// a task's input and commit the counts with the input sequence reached as
// the checkpoint. The run publishes its input, and a known job is what
// lets it check, commit by commit, that a worker resumed each task from the
// right checkpoint and never applied input twice. For a job of the
// worker's own the run makes no input and checks no state: it judges the
// contract alone, and skips what needs the known job.
//
// The members run in this process on internal/sidecar, as the binary runs
// its agent, and the workers are the command under test: the package links
// nothing the sidecar's binary does not need (no build, no harness).
//
// The package is internal: its one user is the handoff conformance
// command, and keeping it out of the public API leaves the cases free to
// grow without a compatibility promise beyond the command's output.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/internal/natsembed"
	"github.com/handoffhq/handoff/internal/poll"
)

// Defaults of Options.
const (
	DefaultTasks       = 4
	DefaultGroup       = "conformance"
	DefaultInputEvery  = 10 * time.Millisecond
	DefaultPhaseWait   = 30 * time.Second
	DefaultReleaseWait = 3 * time.Second
)

// The jobs a run can judge a worker on.
const (
	// JobCount is the counting job of the example workers: the run
	// publishes its input and checks every commit against the exact
	// counts.
	JobCount = "count"
	// JobOwn is a job of the worker's own, which the run does not know: it
	// makes no input and judges the contract alone, from the calls; the
	// cases that need the known job are skipped.
	JobOwn = "own"
)

// Jobs lists the jobs, the default first.
func Jobs() []string { return []string{JobCount, JobOwn} }

// releaseTimeout is the group's release timeout: short, so that a worker
// that never releases costs the run seconds, not minutes, but longer than
// DefaultReleaseWait, so that the agent never moves a task that the worker
// is still expected to release.
const releaseTimeout = 5 * time.Second

// Options configure Run.
type Options struct {
	// Command starts the worker under test; it gets the variables Env*.
	// The run starts it twice: the worker under test, and the second
	// member's worker.
	Command []string
	// Job is the job the worker does: JobCount (the default) or JobOwn.
	Job string
	// Tasks is how many stateful tasks the group has (at least 4).
	Tasks int
	// InputEvery is the pause between two input messages of each task.
	InputEvery time.Duration
	// PhaseWait bounds each step of the run (the worker's start-up
	// included).
	PhaseWait time.Duration
	// ReleaseWait is how soon after a revoke reaches the worker its
	// release must arrive.
	ReleaseWait time.Duration
	// Dir keeps the run's data, agents' log and worker's log; empty uses a
	// temporary directory, removed unless a case failed.
	Dir string
	// Progress, if set, gets one line per step of the run.
	Progress io.Writer
	// Socket makes the agent and the proxy in front of it listen on Unix
	// sockets, as in a pod whose containers share a volume: the worker
	// gets SIDECAR_URL=unix:PATH.
	Socket bool
}

func (o *Options) setDefaults() error {
	if len(o.Command) == 0 {
		return errors.New("no worker command: give it after --, such as: handoff conformance -- python3 examples/python/worker.py")
	}
	switch o.Job {
	case "":
		o.Job = JobCount
	case JobCount, JobOwn:
	default:
		return fmt.Errorf("job %q: the jobs are %v", o.Job, Jobs())
	}
	if o.Tasks == 0 {
		o.Tasks = DefaultTasks
	}
	if o.Tasks < 4 {
		return fmt.Errorf("%d tasks: the cases need at least 4", o.Tasks)
	}
	if o.InputEvery <= 0 {
		o.InputEvery = DefaultInputEvery
	}
	if o.PhaseWait <= 0 {
		o.PhaseWait = DefaultPhaseWait
	}
	if o.ReleaseWait <= 0 {
		o.ReleaseWait = DefaultReleaseWait
	}
	return nil
}

// run is one conformance run's state.
type run struct {
	o     Options
	dir   string
	log   zerolog.Logger
	tasks []string
	token string
	cfg   assign.Config

	srv *natsembed.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	// a serves the worker under test; b, the second member, serves
	// second, another copy of the worker.
	a, b *member

	rec     *recorder
	px      *proxy
	sockets string    // the directory of the sockets, with Options.Socket
	prod    *producer // the counting job's input (nil for JobOwn)
	worker  *process
	second  *process

	// What the run did, for the cases to judge.
	notes  []string // steps that did not complete, in order
	faults map[string]*call
	leftAt time.Time // the second member left
	// secondEnd says how the second member's worker ended, if not with
	// status 0 on shutdown: a copy of the worker under test, it is judged
	// by exit-on-shutdown too.
	secondEnd string
	killed    bool     // the run had to kill the worker
	moved     []string // the tasks the second member took
}

// Run runs the worker of o.Command through the conformance cases and
// reports on each. The error is for a run that could not be set up; a
// worker that fails a case is a Report with Passed false.
func Run(ctx context.Context, o Options) (rep Report, err error) {
	if err := o.setDefaults(); err != nil {
		return rep, err
	}
	started := time.Now()
	r := &run{o: o, faults: map[string]*call{}, rec: &recorder{}}
	cleanup, err := r.openDir()
	if err != nil {
		return rep, err
	}
	defer func() {
		if cleanup(rep.Passed) {
			rep.Dir = ""
		}
	}()
	defer r.close()
	if err := r.setup(ctx); err != nil {
		return rep, err
	}
	r.drive(ctx)
	r.stopWorker()
	if ctx.Err() != nil {
		return rep, fmt.Errorf("conformance run interrupted: %w", context.Cause(ctx))
	}
	rep = r.report()
	rep.Duration = time.Since(started).Round(time.Millisecond).String()
	return rep, nil
}

// openDir makes the run's directory and log. cleanup removes a temporary
// directory after a run that passed, and says whether it did.
func (r *run) openDir() (cleanup func(passed bool) (removed bool), err error) {
	r.dir = r.o.Dir
	temp := r.dir == ""
	if temp {
		if r.dir, err = os.MkdirTemp("", "handoff-conformance-"); err != nil {
			return nil, fmt.Errorf("make the run's directory: %w", err)
		}
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, fmt.Errorf("make the run's directory: %w", err)
	}
	f, err := os.Create(filepath.Join(r.dir, "agents.log"))
	if err != nil {
		return nil, fmt.Errorf("create the agents' log: %w", err)
	}
	r.log = zerolog.New(f).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	return func(passed bool) bool {
		_ = f.Close()
		if temp && passed {
			return os.RemoveAll(r.dir) == nil
		}
		return false
	}, nil
}

func (r *run) progress(format string, args ...any) {
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, "conformance: "+format+"\n", args...)
	}
}

// setup starts NATS, the input, the worker's agent, the proxy and the
// worker.
func (r *run) setup(ctx context.Context) (err error) {
	for i := range r.o.Tasks {
		r.tasks = append(r.tasks, "c-"+strconv.Itoa(i))
	}
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	r.token = hex.EncodeToString(tok[:])
	r.cfg = assign.DefaultConfig()
	r.cfg.Stateful = []string{fmt.Sprintf("c-0..%d", r.o.Tasks-1)}
	r.cfg.ReleaseTimeout = assign.Duration(releaseTimeout)
	r.cfg.LeaveTimeout = assign.Duration(r.o.PhaseWait)

	r.srv, err = natsembed.Start(natsembed.Options{DataDir: filepath.Join(r.dir, "nats"), Listen: "127.0.0.1:0", Logger: r.log.With().Str("component", "nats").Logger()})
	if err != nil {
		return fmt.Errorf("start NATS: %w", err)
	}
	if r.nc, err = nats.Connect(r.srv.ClientURL(), nats.Name("handoff-conformance")); err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	if r.js, err = jetstream.New(r.nc); err != nil {
		return fmt.Errorf("open JetStream: %w", err)
	}
	if r.o.Job == JobCount {
		if err := createStream(ctx, r.js, DefaultGroup); err != nil {
			return err
		}
		r.prod = &producer{js: r.js, group: DefaultGroup, tasks: r.tasks, every: r.o.InputEvery, published: map[string][]message{}}
	}
	agentAddr, proxyAddr := "127.0.0.1:0", "127.0.0.1:0"
	if r.o.Socket {
		// A directory of its own, with a short path: a socket's path is at
		// most 107 bytes, and --dir may be long.
		if r.sockets, err = os.MkdirTemp("", "handoff-conf-"); err != nil {
			return fmt.Errorf("make the sockets' directory: %w", err)
		}
		agentAddr = api.UnixPrefix + filepath.Join(r.sockets, "agent.sock")
		proxyAddr = api.UnixPrefix + filepath.Join(r.sockets, "api.sock")
	}
	if r.a, err = r.startMember(ctx, "worker-under-test", agentAddr); err != nil {
		return err
	}
	if r.px, err = newProxy(r.a.url, proxyAddr, r.rec); err != nil {
		return err
	}
	r.px.start()
	r.progress("agent %s on %s, worker's API (recording proxy) on %s; the %s job", r.a.id, r.a.url, r.px.URL(), r.o.Job)
	r.worker, err = startWorker(r.o.Command, r.workerEnv(r.px.URL()), filepath.Join(r.dir, "worker.log"))
	return err
}

// workerEnv is what a worker of the run gets in its environment, with its
// agent's API at url.
func (r *run) workerEnv(url string) []string {
	return []string{
		EnvSidecarURL + "=" + url,
		EnvSidecarToken + "=" + r.token,
		EnvNATSURL + "=" + r.srv.ClientURL(),
		EnvGroup + "=" + DefaultGroup,
		EnvTasks + "=" + r.cfg.Stateful[0],
	}
}

// close stops everything setup started, in reverse.
func (r *run) close() {
	if r.worker != nil {
		r.worker.kill()
	}
	if r.b != nil {
		_ = r.stopSecond()
	}
	if r.px != nil {
		r.px.close()
	}
	if r.a != nil {
		_ = r.a.stop(r.o.PhaseWait)
	}
	if r.sockets != "" {
		_ = os.RemoveAll(r.sockets)
	}
	if r.nc != nil {
		r.nc.Close()
	}
	if r.srv != nil {
		r.srv.Shutdown()
	}
}

// drive runs the steps. A step that does not complete in time is noted and
// the run goes on where it can, so that every case gets judged.
func (r *run) drive(ctx context.Context) {
	if r.prod != nil {
		prodCtx, stopInput := context.WithCancel(ctx)
		prodDone := make(chan error, 1)
		go func() { prodDone <- r.prod.run(prodCtx) }()
		defer func() {
			stopInput()
			if err := <-prodDone; err != nil {
				r.note("input: %v", err)
			}
		}()
	}

	r.progress("waiting for the worker to commit on every task")
	if !r.wait(ctx, "the worker commits on every task", func() bool { return r.committedAll(r.tasks, time.Time{}) }) {
		return
	}

	r.progress("injecting 503 unavailable, 409 resume, 409 not_owner and a commit left unanswered")
	r.injectFaults(ctx)

	r.progress("a second member joins: tasks are revoked from the worker")
	if !r.join(ctx) {
		return
	}

	r.progress("the second member leaves: its tasks come back, one of them revoked before the worker is shown it")
	if !r.leaveSecond(ctx) {
		return
	}
	// The hidden task is chosen when the worker polls the view that
	// activates it, which may be after the agent shows it.
	r.wait(ctx, "the worker commits on the tasks that came back", func() bool {
		hidden, _ := r.px.hidden()
		back := slices.DeleteFunc(slices.Clone(r.moved), func(t string) bool { return t == hidden })
		return hidden != "" && r.committedAll(back, r.leftAt)
	})

	r.progress("the worker's member leaves: every task is revoked, then the worker is told to shut down")
	if _, err := r.a.agent().Leave(ctx); err != nil {
		r.note("leave the worker's member: %v", err)
		return
	}
	r.waitExit(ctx, r.o.PhaseWait)
}

func (r *run) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
	r.progress("  "+format, args...)
}

// wait polls cond until it holds, the worker exits or the step's time is
// up; it notes a step that did not complete.
func (r *run) wait(ctx context.Context, what string, cond func() bool) bool {
	late := fmt.Errorf("not within %v", r.o.PhaseWait)
	phase, cancel := context.WithTimeoutCause(ctx, r.o.PhaseWait, late)
	defer cancel()
	err := poll.Until(phase, 20*time.Millisecond, func() error {
		switch {
		case cond():
			return nil
		case !r.worker.running():
			return poll.Permanent(fmt.Errorf("the worker %s before that (see %s)", r.worker.status(), r.worker.logPath))
		}
		return errNotYet
	})
	switch {
	case err == nil:
		return true
	case ctx.Err() != nil:
	case errors.Is(err, errNotYet): // the phase's time is up
		r.note("%s: %v", what, late)
	default:
		r.note("%s: %v", what, err)
	}
	return false
}

// errNotYet is the error of a condition that does not hold yet.
var errNotYet = errors.New("not yet")

// waitExit waits up to d for the worker to exit.
func (r *run) waitExit(ctx context.Context, d time.Duration) {
	select {
	case <-r.worker.done:
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// stopWorker kills the worker if it is still running.
func (r *run) stopWorker() {
	if r.worker.running() {
		r.killed = true
	}
	r.worker.kill()
}

// committedAll reports whether each of tasks has an accepted commit that
// started after since.
func (r *run) committedAll(tasks []string, since time.Time) bool {
	done := map[string]bool{}
	for _, c := range r.rec.snapshot() {
		if c.Kind == callCommit && c.Status == 200 && c.Start.After(since) {
			done[c.Task] = true
		}
	}
	for _, t := range tasks {
		if !done[t] {
			return false
		}
	}
	return true
}

// injectFaults answers one commit of c-0 and one poll with 503, one commit
// of c-1 with 409 resume (after the agent accepted it) and one commit of
// c-2 with 409 not_owner, leaves one commit of c-3 unanswered as a paused
// agent would, then waits for the worker to go on.
func (r *run) injectFaults(ctx context.Context) {
	fired := map[string]<-chan *call{
		"unavailable-commit": r.px.arm(callCommit, r.tasks[0], faultUnavailable),
		"resume":             r.px.arm(callCommit, r.tasks[1], faultResume),
		"not_owner":          r.px.arm(callCommit, r.tasks[2], faultNotOwner),
		"unavailable-poll":   r.px.arm(callAssignment, "", faultUnavailable),
		"hang":               r.px.arm(callCommit, r.tasks[3], faultHang),
	}
	r.px.kickPolls()
	for _, name := range []string{"unavailable-commit", "resume", "not_owner", "unavailable-poll", "hang"} {
		select {
		case c := <-fired[name]:
			r.faults[name] = c
		case <-time.After(r.o.PhaseWait):
			r.note("fault %s: the worker made no call to answer it with within %v", name, r.o.PhaseWait)
		case <-ctx.Done():
			return
		}
	}
	if c := r.faults["unavailable-commit"]; c != nil {
		r.wait(ctx, "a commit of "+c.Task+" accepted after the 503", func() bool { return r.committedAll([]string{c.Task}, c.End) })
	}
	if c := r.faults["resume"]; c != nil {
		r.wait(ctx, "a commit of "+c.Task+" accepted after the 409 resume", func() bool { return r.committedAll([]string{c.Task}, c.End) })
	}
	if c := r.faults["hang"]; c != nil {
		r.wait(ctx, "a commit of "+c.Task+" accepted after the unanswered one", func() bool { return r.committedAll([]string{c.Task}, c.End) })
	}
}

// join starts the second member and its worker, a second copy of the
// command (its calls are not judged), and waits until it holds its share
// of the tasks.
func (r *run) join(ctx context.Context) bool {
	listen := "127.0.0.1:0"
	if r.sockets != "" {
		listen = api.UnixPrefix + filepath.Join(r.sockets, "second.sock")
	}
	var err error
	if r.b, err = r.startMember(ctx, "second-member", listen); err != nil {
		r.note("start the second member: %v", err)
		return false
	}
	if r.second, err = startWorker(r.o.Command, r.workerEnv(r.b.url), filepath.Join(r.dir, "second-worker.log")); err != nil {
		r.note("start the second member's worker: %v", err)
		return false
	}
	share := r.o.Tasks / 2
	took := func() bool { return len(activeTasks(r.b.agent().Assignment())) == share }
	if !r.wait(ctx, "the second member takes its share of the tasks", func() bool { return took() || !r.second.running() }) {
		return false
	}
	if !took() {
		r.note("the second member's worker %s before it took its share of the tasks (see %s)", r.second.status(), r.second.logPath)
		return false
	}
	return true
}

// leaveSecond makes the second member leave, hiding the activation of one
// of its tasks on the way back, and waits until the worker's member holds
// every task again.
func (r *run) leaveSecond(ctx context.Context) bool {
	r.moved = activeTasks(r.b.agent().Assignment())
	r.px.hideNext(r.moved)
	if _, err := r.b.agent().Leave(ctx); err != nil {
		r.note("leave the second member: %v", err)
		return false
	}
	ok := r.wait(ctx, "every task is active on the worker's member again", func() bool {
		return len(activeTasks(r.a.agent().Assignment())) == r.o.Tasks
	})
	select {
	case <-r.second.done:
		if r.second.err != nil {
			r.secondEnd = fmt.Sprintf("%s when its member left (see %s)", r.second.status(), r.second.logPath)
		}
	case <-time.After(r.o.PhaseWait):
		r.secondEnd = fmt.Sprintf("was still running %v after its member left", r.o.PhaseWait)
	}
	if err := r.stopSecond(); err != nil {
		r.note("%v", err)
	}
	r.leftAt = time.Now()
	return ok
}

// stopSecond stops the second member's worker, then the member.
func (r *run) stopSecond() error {
	if r.second != nil {
		r.second.kill()
	}
	err := r.b.stop(r.o.PhaseWait)
	r.b = nil
	return err
}

// activeTasks lists the tasks v shows active and not revoked.
func activeTasks(v api.View) []string {
	var out []string
	for _, tv := range v.Tasks {
		if tv.Role == api.RoleActive && !slices.Contains(v.Revoke, tv.ID) {
			out = append(out, tv.ID)
		}
	}
	return out
}

package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/countworker"
	"github.com/handoffhq/handoff/internal/sidecar"
)

// LocalOptions configure a member in this process.
type LocalOptions struct {
	// NATSURL is the NATS server the member connects to.
	NATSURL string
	// Connect opens one of the member's connections to NATS: name is
	// "agent-<id>" or "worker-<id>". Nil dials NATSURL as "handoff-<name>",
	// with reconnects forever, 50 ms apart.
	Connect func(name string) (*nats.Conn, error)
	// Sidecar wires the member (its ID is Sidecar.Agent.MemberID): its data
	// directory, store, agent and, with Sidecar.Listen set, worker API.
	Sidecar sidecar.Options
	// Worker, if set, runs a counter worker (countworker.Run) in this
	// process, on a NATS connection of its own, against the member's API
	// (with the API's token). Its Client and JS are filled in.
	Worker *countworker.Options
}

// Local is one member in this process, wired as the binary wires one
// (internal/sidecar), on NATS connections of its own, with the counter
// worker of LocalOptions.Worker if set. OpenLocal opens it, Start runs it;
// Stop, Crash, or Halt then Close end it. Its methods are for one
// goroutine at a time; Member's parts are safe for concurrent use.
type Local struct {
	ID     string
	NC     *nats.Conn
	Member *sidecar.Member // the store, agent and API

	opts     LocalOptions
	workerNC *nats.Conn

	cancelRun, cancelWorker context.CancelFunc
	ran, workerDone         chan struct{}
	runErr, workerErr       error
	stuck                   bool // Halt left a part running
}

// OpenLocal opens the member's connections, store, agent and API listener.
// Nothing runs until Start.
func OpenLocal(ctx context.Context, o LocalOptions) (_ *Local, err error) {
	id := o.Sidecar.Agent.MemberID
	if o.Connect == nil {
		o.Connect = func(name string) (*nats.Conn, error) {
			return nats.Connect(o.NATSURL, nats.Name("handoff-"+name), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		}
	}
	m := &Local{ID: id, opts: o}
	defer func() {
		if err != nil {
			m.CloseConnections()
		}
	}()
	if m.NC, err = o.Connect("agent-" + id); err != nil {
		return nil, fmt.Errorf("connect member %s to NATS: %w", id, err)
	}
	if o.Worker != nil {
		if m.workerNC, err = o.Connect("worker-" + id); err != nil {
			return nil, fmt.Errorf("connect the worker of %s to NATS: %w", id, err)
		}
	}
	if m.Member, err = sidecar.Open(ctx, m.NC, o.Sidecar); err != nil {
		return nil, fmt.Errorf("open member %s: %w", id, err)
	}
	return m, nil
}

// URL is the member's API as a client takes it (http://HOST:PORT, or
// unix:PATH); "" without one.
func (m *Local) URL() string {
	if m.Member.Addr == nil {
		return ""
	}
	return APIURL(m.Member.Addr.String())
}

// Client is a client of the member's API, with its token.
func (m *Local) Client() *client.Client {
	var opts []client.Option
	if tok := m.opts.Sidecar.API.Token; tok != "" {
		opts = append(opts, client.WithToken(tok))
	}
	return client.New(m.URL(), opts...)
}

// Start runs the agent and the API (sidecar.Member.Run) and the worker,
// each until the member is halted.
func (m *Local) Start() error {
	var js jetstream.JetStream
	if m.opts.Worker != nil {
		var err error
		if js, err = jetstream.New(m.workerNC); err != nil {
			return fmt.Errorf("jetstream for the worker of %s: %w", m.ID, err)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	m.cancelRun, m.ran = cancel, make(chan struct{})
	go func() {
		defer close(m.ran)
		m.runErr = m.Member.Run(runCtx, nil)
	}()
	workerCtx, cancel := context.WithCancel(context.Background())
	m.cancelWorker, m.workerDone = cancel, make(chan struct{})
	if m.opts.Worker == nil {
		close(m.workerDone)
		return nil
	}
	wo := *m.opts.Worker
	wo.Client, wo.JS = m.Client(), js
	go func() {
		defer close(m.workerDone)
		m.workerErr = countworker.Run(workerCtx, wo)
	}()
	return nil
}

// WorkerDone is closed once the worker has returned: on its own, after
// the agent said shutdown, or halted. Without a worker it is closed.
func (m *Local) WorkerDone() <-chan struct{} { return m.workerDone }

// Err is what stopped the agent, the API or the worker, once halted.
func (m *Local) Err() error { return errors.Join(m.runErr, m.workerErr) }

// Halt stops a started member's parts without closing them, each waited for at
// most wait. Gracefully, the worker stops first, so that its last commits
// land, then the API and the agent. Otherwise (a crash, as far as the
// group can tell) the member's connection drops first, so that nothing
// more is heard from it. A part that does not stop in time is left
// running and named in the error; Close then closes only the connections.
func (m *Local) Halt(graceful bool, wait time.Duration) error {
	if !graceful {
		m.NC.Close()
		m.cancelRun()
	}
	var stuck []string
	m.cancelWorker()
	if !WaitClosed(m.workerDone, wait) {
		stuck = append(stuck, "worker")
	}
	m.cancelRun()
	if !WaitClosed(m.ran, wait) {
		stuck = append(stuck, "agent and API")
	}
	if len(stuck) > 0 {
		m.stuck = true
		return fmt.Errorf("member %s: %s did not stop within %s; left running", m.ID, strings.Join(stuck, ", "), wait)
	}
	return nil
}

// Close closes a halted member: gracefully, its agent deletes its member
// record, so that the group sees it gone at once; otherwise the record is
// left to expire. Then its connections close. A member that Halt could
// not stop keeps its store open (closing it under a running agent would
// crash the process) and only loses its connections.
func (m *Local) Close(graceful bool) error {
	defer m.CloseConnections()
	if m.stuck {
		return nil
	}
	if graceful {
		return m.Member.Close()
	}
	return m.Member.Crash()
}

// CloseConnections closes the member's connections and nothing else: for
// a halted member whose store may still be in use (by a caller's call into
// the agent that did not return, say), which it leaves open.
func (m *Local) CloseConnections() {
	if m.workerNC != nil {
		m.workerNC.Close()
	}
	if m.NC != nil {
		m.NC.Close()
	}
}

// Stop stops the member gracefully (Halt, then Close) and returns what
// went wrong, its parts' own errors included.
func (m *Local) Stop(wait time.Duration) error {
	if err := m.Halt(true, wait); err != nil {
		return errors.Join(err, m.Close(true))
	}
	return errors.Join(m.Err(), m.Close(true))
}

// Crash ends the member the way kill -9 does, as far as the group can
// tell: its connection drops first, and its record and tasks stay until
// its session expires. Its data directory stays for a restart.
func (m *Local) Crash(wait time.Duration) error {
	return errors.Join(m.Halt(false, wait), m.Close(false))
}

// Abort closes a member that was opened and never started.
func (m *Local) Abort() {
	_ = m.Member.Crash() // it never ran: there is no record to delete
	m.CloseConnections()
}

// WaitClosed waits until ch is closed, at most d; it reports whether ch
// was closed.
func WaitClosed(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

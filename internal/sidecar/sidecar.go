// Package sidecar is the one way to wire a member of a group: it opens the
// member's local store, its agent and its worker API on a NATS connection
// the caller owns, runs the agent and the API together, and closes them in
// reverse order. The binary (handoff agent) wires its member with it, so
// does the conformance run (handoff conformance), and so do the harnesses
// (the lab behind demo and bench, the agent's tests) through
// internal/cluster's Local.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/statestore"
)

// The agent is the API's backend and hears of its worker through it; agent
// does not import httpapi, so the two meet here.
var (
	_ httpapi.Backend        = (*agent.Agent)(nil)
	_ httpapi.WorkerObserver = (*agent.Agent)(nil)
)

// Options configure a Member.
type Options struct {
	// DataDir holds the member's local state (in DataDir/state) and its
	// owner token (DataDir/owner, see agent.Options.Owner).
	DataDir string
	// Store configures the local store (its Logger is set from Logger).
	// Open waits (answering ctx) while the store's disk is short of space.
	Store statestore.Options
	Agent agent.Options
	// Listen is the worker API's address ("127.0.0.1:0" picks a port);
	// empty means the member serves no API. The API tells the agent when
	// its worker attaches and detaches unless API.Worker says otherwise.
	Listen string
	API    httpapi.Options
	// MetricsListen, if set, is a second listener (host:port) that serves
	// the API's /metrics, /healthz and /readyz alone, without the token
	// (httpapi's ProbeHandler): for Prometheus and probes from outside a
	// pod whose API is on a Unix socket. It needs Listen.
	MetricsListen string
	// OpenTimeout bounds joining the group's NATS resources; 0 means 30 s
	// plus two session timeouts.
	OpenTimeout time.Duration
	// Logger gets the store's log and the member's own events.
	Logger zerolog.Logger
}

// Member is one member's parts, opened in order: its store, its agent, and
// its API (nil without Options.Listen), listening at Addr.
type Member struct {
	Store *statestore.Store
	Agent *agent.Agent
	API   *httpapi.Server
	Addr  net.Addr
	// MetricsAddr is where the metrics listener listens (nil without
	// Options.MetricsListen).
	MetricsAddr net.Addr
	probes      net.Listener

	log       zerolog.Logger
	onCorrupt statestore.CorruptPolicy // what the next Open does with a corrupt store
	served    atomic.Bool              // the API has been run (and so closes its listener)
}

// Open opens the store, the agent and the API listener, in that order, and
// closes what it opened if a later step fails. Nothing runs yet.
func Open(ctx context.Context, nc *nats.Conn, o Options) (_ *Member, err error) {
	m := &Member{log: o.Logger, onCorrupt: o.Store.OnCorrupt}
	sopts := o.Store
	sopts.Logger = o.Logger.With().Str("component", "pebble").Logger()
	o.Logger.Info().Str("dir", filepath.Join(o.DataDir, "state")).Msg("opening the local store")
	m.Store, err = statestore.OpenWait(ctx, filepath.Join(o.DataDir, "state"), sopts)
	if err != nil {
		return nil, fmt.Errorf("open local state in %s: %w", o.DataDir, err)
	}
	defer func() {
		if err != nil {
			_ = m.Store.Close()
		}
	}()
	if o.Agent.Owner == "" {
		fsys := sopts.FS // the token lives beside the store, on its file system
		if fsys == nil {
			fsys = vfs.Default
		}
		if o.Agent.Owner, err = dataDirOwner(fsys, o.DataDir); err != nil {
			return nil, fmt.Errorf("data dir %s: %w", o.DataDir, err)
		}
	}
	timeout := o.OpenTimeout
	if timeout == 0 {
		// Joining may wait up to one and a half session timeouts for the
		// record of a dead holder of the member ID to expire.
		timeout = 30*time.Second + 2*o.Agent.Config.SessionTimeout.D()
	}
	openCtx, cancel := context.WithTimeout(ctx, timeout)
	o.Logger.Info().Str("group", o.Agent.Group).Str("member", o.Agent.MemberID).Msg("joining the group")
	m.Agent, err = agent.Open(openCtx, nc, m.Store, o.Agent)
	cancel()
	if err != nil {
		return nil, err
	}
	if o.Listen == "" {
		return m, nil
	}
	api := o.API
	if api.Worker == nil {
		api.Worker = m.Agent // the worker's polls tell the agent it is there
	}
	m.API = httpapi.New(m.Agent, api)
	if m.Addr, err = m.API.Listen(o.Listen); err != nil {
		m.Agent.Abandon()
		return nil, fmt.Errorf("worker API: %w", err)
	}
	if o.MetricsListen != "" {
		if err := m.listenProbes(o.MetricsListen); err != nil {
			m.closeListener()
			m.Agent.Abandon()
			return nil, err
		}
	}
	return m, nil
}

// Run runs the agent and the API until ctx ends or one of them stops on its
// own, or the store fails for good. When ctx ends, it first calls
// beforeStop (if set) while both still run (the binary hands its tasks over
// there), then stops the API, then the agent. It returns the first error
// that stopped either, or the store's failure.
func (m *Member) Run(ctx context.Context, beforeStop func()) error {
	runCtx, stopRun := context.WithCancel(context.Background())
	apiCtx, stopAPI := context.WithCancel(context.Background())
	defer stopRun()
	defer stopAPI()
	var g errgroup.Group
	runErr, apiErr := make(chan error, 1), make(chan error, 1)
	g.Go(func() error {
		err := m.Agent.Run(runCtx)
		runErr <- err
		return err
	})
	if m.API != nil {
		g.Go(func() error {
			err := m.serveAPI(apiCtx)
			apiErr <- err
			return err
		})
	}
	if m.probes != nil {
		g.Go(func() error {
			err := m.serveProbes(apiCtx)
			if err != nil {
				// Monitoring is blind, but the worker is served: go on.
				m.log.Error().Err(err).Msg("metrics listener stopped")
			}
			return err
		})
	}
	select {
	case <-ctx.Done():
		if beforeStop != nil {
			beforeStop()
		}
	case err := <-runErr:
		if err != nil {
			m.log.Error().Err(err).Msg("agent stopped")
		}
	case err := <-apiErr:
		// The worker can no longer reach this member: stop, so that the
		// group fails its tasks over, instead of holding them unserved.
		m.log.Error().Err(err).Msg("worker API stopped; stopping the agent")
	case <-m.Store.Failed():
		// The local store cannot serve any more: stop, so that the group
		// fails the tasks over; a restart reopens (or rebuilds) it.
		stopAPI()
		stopRun()
		_ = g.Wait()
		return storeFailed(m.Store.Err(), m.onCorrupt)
	}
	stopAPI()
	stopRun()
	return g.Wait()
}

// storeFailed is Run's error when the local store failed for good with
// err: it names what the store found, and what the next start does.
func storeFailed(err error, onCorrupt statestore.CorruptPolicy) error {
	switch {
	case errors.Is(err, statestore.ErrCorrupt) && onCorrupt == statestore.Fail:
		return fmt.Errorf("the local store is corrupt, stopping the agent so that the group moves its tasks; the next start refuses it (the fail policy): move its directory aside to rebuild it from the changelog: %w", err)
	case errors.Is(err, statestore.ErrCorrupt):
		return fmt.Errorf("the local store is corrupt, stopping the agent so that the group moves its tasks; restart it: the next start moves the store aside and rebuilds it from snapshots and the changelog: %w", err)
	}
	return fmt.Errorf("the local store failed, stopping the agent so that the group moves its tasks; restart it once the cause in this message is dealt with (free space, if its disk is full): it keeps its store and replays what it lacks from the changelog: %w", err)
}

// serveAPI serves the worker API until ctx ends.
func (m *Member) serveAPI(ctx context.Context) error {
	m.served.Store(true)
	return m.API.Run(ctx)
}

// Close closes the parts in reverse order: the API's listener if it never
// served, the agent (which deletes the member record, so the group sees
// the member gone at once), then the store. The NATS connection is the
// caller's.
func (m *Member) Close() error {
	m.closeListener()
	return errors.Join(m.Agent.Close(), m.Store.Close())
}

// Crash closes the member the way a crash ends it, as far as the group can
// tell: its record is left to expire. The caller closes the NATS
// connection first, so that nothing more is heard from the member.
func (m *Member) Crash() error {
	m.closeListener()
	m.Agent.Abandon()
	return m.Store.Close()
}

// closeListener closes the API's listener, and the metrics listener, if
// Run never served them.
func (m *Member) closeListener() {
	if m.API != nil && m.served.CompareAndSwap(false, true) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = m.API.Run(ctx) // serves nothing and closes the listener
		if m.probes != nil {
			_ = m.probes.Close()
		}
	}
}

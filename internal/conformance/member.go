package conformance

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/statestore"
)

// member is one real agent of the conformance group, in this process: its
// own NATS connection, Pebble store, agent and HTTP API on a free port.
type member struct {
	id    string
	nc    *nats.Conn
	store *statestore.Store
	agent *agent.Agent
	api   *httpapi.Server
	addr  string // the API's host:port

	cancel  context.CancelFunc
	agentCh chan error
	apiCh   chan error
}

// startMember opens and runs member id of group on the NATS server at url,
// with its data under dir.
func startMember(ctx context.Context, url, dir, group, id, token string, cfg assign.Config, log zerolog.Logger) (_ *member, err error) {
	m := &member{id: id, agentCh: make(chan error, 1), apiCh: make(chan error, 1)}
	log = log.With().Str("member", id).Logger()
	defer func() {
		if err != nil {
			m.closeResources()
		}
	}()
	m.nc, err = nats.Connect(url, nats.Name("handoff-conformance-"+id), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("connect member %s to NATS: %w", id, err)
	}
	m.store, err = statestore.Open(filepath.Join(dir, id), statestore.Options{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("open the store of member %s: %w", id, err)
	}
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	m.agent, err = agent.Open(openCtx, m.nc, m.store, agent.Options{Group: group, MemberID: id, Config: cfg, Logger: log})
	cancel()
	if err != nil {
		m.agent = nil
		return nil, fmt.Errorf("open the agent of member %s: %w", id, err)
	}
	m.api = httpapi.New(m.agent, httpapi.Options{Token: token, Logger: log})
	addr, err := m.api.Listen("127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("the API of member %s: %w", id, err)
	}
	m.addr = addr.String()
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel = cancelRun
	go func() { m.agentCh <- m.agent.Run(runCtx) }()
	go func() { m.apiCh <- m.api.Run(runCtx) }()
	return m, nil
}

// URL is the base URL of the member's API.
func (m *member) URL() string { return "http://" + m.addr }

// stop stops the API and the agent and closes what they used.
func (m *member) stop() error {
	if m.cancel == nil {
		m.closeResources()
		return nil
	}
	m.cancel()
	err := errors.Join(<-m.apiCh, <-m.agentCh)
	m.cancel = nil
	m.closeResources()
	if err != nil {
		return fmt.Errorf("stop member %s: %w", m.id, err)
	}
	return nil
}

func (m *member) closeResources() {
	if m.agent != nil {
		_ = m.agent.Close()
	}
	if m.store != nil {
		_ = m.store.Close()
	}
	if m.nc != nil {
		m.nc.Close()
	}
}

package conformance

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/internal/sidecar"
)

// member is one real agent of the conformance group, in this process,
// wired as the binary wires one (internal/sidecar): its own NATS
// connection, store, agent and worker API on a free port.
type member struct {
	id    string
	nc    *nats.Conn
	sc    *sidecar.Member
	agent *agent.Agent

	cancel context.CancelFunc
	ran    chan error // Run's end
}

// startMember opens and runs member id of group on the NATS server at url,
// with its data under dir and its API on listen.
func startMember(ctx context.Context, url, dir, listen, group, id, token string, cfg assign.Config, log zerolog.Logger) (*member, error) {
	log = log.With().Str("member", id).Logger()
	nc, err := nats.Connect(url, nats.Name("handoff-conformance-"+id), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("connect member %s to NATS: %w", id, err)
	}
	sc, err := sidecar.Open(ctx, nc, sidecar.Options{
		DataDir: filepath.Join(dir, id),
		Agent:   agent.Options{Group: group, MemberID: id, Config: cfg, Logger: log},
		Listen:  listen,
		API:     httpapi.Options{Token: token, Logger: log},
		Logger:  log,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("open member %s: %w", id, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &member{id: id, nc: nc, sc: sc, agent: sc.Agent, cancel: cancel, ran: make(chan error, 1)}
	go func() { m.ran <- sc.Run(runCtx, nil) }()
	return m, nil
}

// URL is the member's API as a client takes it: http://HOST:PORT, or
// unix:PATH.
func (m *member) URL() string {
	a := m.sc.Addr.String()
	if _, socket := api.SocketPath(a); socket {
		return a
	}
	return "http://" + a
}

// stop stops the API and the agent, then closes them and the connection.
func (m *member) stop() error {
	m.cancel()
	err := errors.Join(<-m.ran, m.sc.Close())
	m.nc.Close()
	if err != nil {
		return fmt.Errorf("stop member %s: %w", m.id, err)
	}
	return nil
}

package conformance

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/internal/sidecar"
)

// member is one member of the conformance group in this process: a real
// agent and API wired by internal/sidecar, as 'handoff agent' wires one, on
// a NATS connection of its own. Its worker is a process of the run's.
// The run uses only what the binary links for 'handoff agent': no build,
// no harness.
type member struct {
	id  string
	nc  *nats.Conn
	m   *sidecar.Member
	url string // the API as a client takes it: http://HOST:PORT or unix:PATH

	cancel context.CancelFunc
	ran    chan struct{} // closed once Run returned
	err    error         // Run's error, once ran is closed
}

// startMember opens and runs member id of the conformance group, with its
// data under the run's directory and its API (with the run's token) on
// listen.
func (r *run) startMember(ctx context.Context, id, listen string) (_ *member, err error) {
	log := r.log.With().Str("member", id).Logger()
	nc, err := nats.Connect(r.srv.ClientURL(), nats.Name("handoff-agent-"+id), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("connect member %s to NATS: %w", id, err)
	}
	sm, err := sidecar.Open(ctx, nc, sidecar.Options{
		DataDir: filepath.Join(r.dir, id),
		Agent:   agent.Options{Group: DefaultGroup, MemberID: id, Config: r.cfg, Logger: log},
		Listen:  listen,
		API:     httpapi.Options{Token: r.token, Logger: log},
		Logger:  log,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("open member %s: %w", id, err)
	}
	m := &member{id: id, nc: nc, m: sm, url: apiURL(sm.Addr.String()), ran: make(chan struct{})}
	runCtx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.ran)
		m.err = sm.Run(runCtx, nil)
	}()
	return m, nil
}

// apiURL is a listener's address as a client takes it.
func apiURL(addr string) string {
	if _, socket := api.SocketPath(addr); socket {
		return addr
	}
	return "http://" + addr
}

// agent is the member's agent, for the run to read its view and to make it
// leave.
func (m *member) agent() *agent.Agent { return m.m.Agent }

// stop stops the API and the agent, waiting at most wait, then closes the
// member: its record is deleted, so the group sees it gone at once. A
// member that did not stop in time keeps its store open (closing it under
// a running agent would crash the process) and only loses its connection.
func (m *member) stop(wait time.Duration) error {
	defer m.nc.Close()
	m.cancel()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-m.ran:
	case <-t.C:
		return fmt.Errorf("member %s did not stop within %v; left running", m.id, wait)
	}
	return errors.Join(m.err, m.m.Close())
}

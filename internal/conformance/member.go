package conformance

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/countworker"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/internal/cluster"
	"github.com/handoffhq/handoff/internal/sidecar"
)

// startMember opens and runs member id of the conformance group, a real
// agent in this process wired as the binary wires one, with its data under
// the run's directory and its API (with the run's token) on listen. With
// worker, an in-process counter worker runs against it: the second
// member's, which makes tasks move.
func (r *run) startMember(ctx context.Context, id, listen string, worker bool) (*cluster.Local, error) {
	log := r.log.With().Str("member", id).Logger()
	o := cluster.LocalOptions{
		NATSURL: r.srv.ClientURL(),
		Sidecar: sidecar.Options{
			DataDir: filepath.Join(r.dir, id),
			Agent:   agent.Options{Group: DefaultGroup, MemberID: id, Config: r.cfg, Logger: log},
			Listen:  listen,
			API:     httpapi.Options{Token: r.token, Logger: log},
			Logger:  log,
		},
	}
	if worker {
		o.Worker = &countworker.Options{Group: DefaultGroup, Logger: log.With().Str("component", "worker").Logger()}
	}
	m, err := cluster.OpenLocal(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := m.Start(); err != nil {
		m.Abort()
		return nil, fmt.Errorf("start member %s: %w", id, err)
	}
	return m, nil
}

package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/handoffhq/handoff/internal/proc"
)

// StartNATS starts count nats-server processes with JetStream under dir
// (one, or a cluster of count nodes) and waits until every one is healthy
// or ctx ends. On an error, the servers it started are killed.
func StartNATS(ctx context.Context, bin, dir string, count int) (_ []*proc.NATSServer, err error) {
	servers, err := proc.NewNATSServers(bin, dir, count)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			for _, n := range servers {
				err = errors.Join(err, n.Proc.Kill())
			}
		}
	}()
	for _, n := range servers {
		if err := n.Start(); err != nil {
			return nil, err
		}
	}
	for _, n := range servers {
		if err := n.WaitHealthy(ctx); err != nil {
			return nil, fmt.Errorf("start NATS: %w", err)
		}
	}
	return servers, nil
}

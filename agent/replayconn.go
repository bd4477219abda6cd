package agent

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/snapshot"
)

// replayConn is a NATS connection of the agent's own for reading
// changelogs, apart from the one that carries its heartbeats, lease,
// watches and commits: a burst of replays can outrun the server's
// per-connection buffer, and a slow-consumer disconnect must not cost the
// member those. An agent has two: one for restores that catch up, which
// pull megabytes at a time, and one for the tailers of learners and
// standbys that have caught up, so that a new message (the release entry
// that hands a task over) reaches its tailer at once instead of queuing
// behind other restores' bytes in the same socket.
type replayConn struct {
	nc    *nats.Conn
	log   *changelog.Log
	snaps *snapshot.Bucket
	// back fires when the connection comes back after a disconnect: every
	// restore on it ends, and its task starts a fresh one (runRestore).
	back *broadcast
}

// openReplayConn connects like nc, naming the connection with purpose.
func openReplayConn(ctx context.Context, nc *nats.Conn, purpose string, opts Options, log zerolog.Logger) (*replayConn, error) {
	o := nc.Opts
	o.Name += " (" + purpose + ")"
	rc := &replayConn{back: newBroadcast()}
	var err error
	if rc.nc, err = o.Connect(); err != nil {
		return nil, fmt.Errorf("connect for %s: %w", purpose, err)
	}
	js, err := jetstream.New(rc.nc)
	if err != nil {
		rc.nc.Close()
		return nil, fmt.Errorf("jetstream for %s: %w", purpose, err)
	}
	if rc.log, err = changelog.Open(ctx, js, changelog.Options{Group: opts.Group, Replicas: opts.Replicas}); err != nil {
		rc.nc.Close()
		return nil, err
	}
	if rc.snaps, err = snapshot.OpenExisting(ctx, js, opts.Group); err != nil {
		rc.nc.Close()
		return nil, err
	}
	prev := rc.nc.Opts.ReconnectedCB
	rc.nc.SetReconnectHandler(func(c *nats.Conn) {
		if prev != nil {
			prev(c)
		}
		rc.back.fire()
		log.Info().Str("connection", purpose).Msg("replay connection reconnected to NATS: restarting restores")
	})
	return rc, nil
}

// close closes the connection; nil-safe, for the error paths of Open.
func (rc *replayConn) close() {
	if rc != nil {
		rc.nc.Close()
	}
}

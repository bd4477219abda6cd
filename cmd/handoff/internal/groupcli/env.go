// Package groupcli is the logic of the handoff commands that work on a group
// from outside it: 'status' and 'group' read (and 'group set' edits) the
// group's records in NATS, 'plan' runs the assignor on a snapshot. It is a
// package of its own, apart from package main and 'handoff agent', so that
// 'go list -deps' can prove these commands never link a member's runtime:
// they reach the group through agent/group, agent/assign and api
// only. Package main registers each command and passes in what it owns
// (the NATS connection flags and the agent's group-setting flags).
package groupcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/internal/redact"
)

// Env is what a command may touch of the outside world, and the flags it
// shares with the rest of the binary.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	// NATSFlags registers on fs the flags that say how to reach NATS, with
	// url as the default of --nats and usage as its help, and returns the
	// connection they describe once fs is parsed.
	NATSFlags func(fs *flag.FlagSet, url, usage string) NATS
	// GroupFlags registers on fs the flags of 'handoff agent' that set the
	// group's config, bound to the returned config; 'group set' copies the
	// ones given from it.
	GroupFlags func(fs *flag.FlagSet) *assign.Config
}

// NATS is a NATS server the flags of a command name.
type NATS interface {
	// Connect dials the server; name is the connection's name.
	Connect(name string) (*natsgo.Conn, error)
	// URL is the server's URL as given, credentials and all.
	URL() string
}

// clientFlags are the flags of the commands that read a group from NATS.
type clientFlags struct {
	group string
	nats  NATS
}

func (c *clientFlags) register(fs *flag.FlagSet, e Env) {
	fs.StringVar(&c.group, "group", "default", "`name` of the group")
	c.nats = e.NATSFlags(fs, "nats://127.0.0.1:4222", "NATS server `URL`s (comma-separated) the group's agents use")
}

// open connects to NATS and opens the group's KV bucket.
func (c *clientFlags) open(ctx context.Context, name string) (jetstream.KeyValue, func(), error) {
	nc, kv, err := c.openConn(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	return kv, nc.Close, nil
}

// openConn is open that also returns the connection, the caller's to
// close.
func (c *clientFlags) openConn(ctx context.Context, name string) (*natsgo.Conn, jetstream.KeyValue, error) {
	nc, err := c.nats.Connect(name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	kv, err := js.KeyValue(ctx, group.BucketName(c.group))
	if err != nil {
		nc.Close()
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil, fmt.Errorf("group %q does not exist on %s (no agent has started it)", c.group, redact.URL(c.nats.URL()))
		}
		return nil, nil, fmt.Errorf("open group %q: %w", c.group, err)
	}
	return nc, kv, nil
}

// parseInterleaved parses args with fs, flags before, between and after
// the positional arguments (flag.Parse stops at the first of them), and
// returns the positional ones. After "--" every argument is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

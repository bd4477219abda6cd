package main

import (
	"context"
	"flag"

	natsgo "github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/cmd/handoff/internal/groupcli"
)

func init() {
	register("group", "show or change a group's stored config", func(ctx context.Context, args []string, e *env) error {
		return groupcli.Group(ctx, args, groupEnv(e))
	})
}

// groupEnv is what the commands of groupcli get of e, with the flags they
// share with 'handoff agent': how to reach NATS, and the group settings.
func groupEnv(e *env) groupcli.Env {
	return groupcli.Env{Stdin: e.stdin, Stdout: e.stdout, NATSFlags: clientNATSFlags, GroupFlags: groupSettingFlags}
}

// clientNATS is the NATS server a groupcli command's flags name.
type clientNATS struct{ n nats }

func (c *clientNATS) Connect(name string) (*natsgo.Conn, error) {
	return connect(c.n, name, zerolog.Nop(), hintServer)
}

func (c *clientNATS) URL() string { return c.n.URL }

func clientNATSFlags(fs *flag.FlagSet, url, usage string) groupcli.NATS {
	c := &clientNATS{n: nats{URL: url}}
	natsFlags(fs, &c.n, usage)
	return c
}

// groupSettingFlags registers the agent's group settings on fs, bound to a
// scratch config.
func groupSettingFlags(fs *flag.FlagSet) *assign.Config {
	var scratch Config
	agentFlags(&scratch).VisitAll(func(f *flag.Flag) {
		if _, ok := groupFields[f.Name]; ok {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	return &scratch.GroupConfig
}

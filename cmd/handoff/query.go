package main

import (
	"context"

	"github.com/handoffhq/handoff/cmd/handoff/internal/groupcli"
)

func init() {
	register("query", "read a key of any task's state from the group over NATS, within a staleness bound", func(ctx context.Context, args []string, e *env) error {
		return groupcli.Query(ctx, args, groupEnv(e))
	})
}

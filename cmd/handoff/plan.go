package main

import (
	"context"

	"github.com/handoffhq/handoff/cmd/handoff/internal/groupcli"
)

func init() {
	register("plan", "preview the leader's next assignment for a group snapshot", func(ctx context.Context, args []string, e *env) error {
		return groupcli.Plan(ctx, args, groupEnv(e))
	})
}

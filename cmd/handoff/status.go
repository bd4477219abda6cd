package main

import (
	"context"

	"github.com/handoffhq/handoff/cmd/handoff/internal/groupcli"
)

func init() {
	register("status", "show the group at a glance: leader, members, tasks, learners", func(ctx context.Context, args []string, e *env) error {
		return groupcli.Status(ctx, args, groupEnv(e))
	})
}

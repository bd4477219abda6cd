package main

import (
	"context"

	"github.com/handoffhq/handoff/cmd/handoff/internal/demo"
)

func init() {
	register("demo", "watch a group scale up and down without pausing tasks to rebuild state (no setup)", func(ctx context.Context, args []string, e *env) error {
		return demo.Run(ctx, args, demo.Env{Stdout: e.stdout, Getenv: e.getenv})
	})
}

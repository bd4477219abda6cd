package main

import (
	"context"

	"github.com/handoffhq/handoff/cmd/handoff/internal/bench"
)

func init() {
	register("bench", "measure rebalance efficiency: pauses, time to balanced, replay, per hand-off mode", func(ctx context.Context, args []string, e *env) error {
		return bench.Run(ctx, args, bench.Env{Stdout: e.stdout, Stderr: e.stderr})
	})
}

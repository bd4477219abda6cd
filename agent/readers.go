package agent

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/httpapi"
)

// BucketName is group.BucketName, for callers that run agents and read
// their group.
func BucketName(g string) string { return group.BucketName(g) }

// ReadGroup is group.ReadGroup.
func ReadGroup(ctx context.Context, kv jetstream.KeyValue, g string, progress []httpapi.LearnerProgress) (httpapi.GroupView, error) {
	return group.ReadGroup(ctx, kv, g, progress)
}

// WatchProgress calls fn with the worker API's part of every progress
// report published in group g (see group.WatchProgress).
func WatchProgress(nc *nats.Conn, g string, fn func(httpapi.LearnerProgress)) (stop func(), err error) {
	return group.WatchProgress(nc, g, func(p group.Progress) { fn(p.LearnerProgress) })
}

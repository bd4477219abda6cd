// Package httpapi is the worker-facing HTTP API of the sidecar (chi): the
// worker's assignment with long-polling, releases, state reads and commits,
// leave, health, metrics and the group's view. It declares the Backend it
// needs and maps the Backend's errors (api's sentinels) to statuses and
// codes; the documents it speaks are api's. It knows nothing of NATS or
// Pebble.
package httpapi

import (
	"context"

	"github.com/handoffhq/handoff/api"
)

// Backend is what the API needs from the agent. Implementations are safe
// for concurrent use.
type Backend interface {
	// Assignment returns the current view.
	Assignment() api.View
	// WaitAssignment returns the view once its Version exceeds after, or
	// the current view when ctx ends.
	WaitAssignment(ctx context.Context, after uint64) api.View
	// Release records that the worker stopped a revoked task. epoch, when
	// not 0, is the ownership the worker stopped: a release for another
	// epoch than the task's here is refused with ErrNotOwner, so that a run
	// of an earlier ownership never releases a later one.
	Release(ctx context.Context, task string, epoch uint64) (api.ReleaseResult, error)
	// Get, GetMany and Scan read an active task's state.
	Get(task string, key []byte) ([]byte, error)
	// GetMany returns the values of keys, in their order, read at one
	// point in time: nil for an absent key, a non-nil slice (maybe empty)
	// for a present one. Values over maxBytes in total fail with an error
	// wrapping ErrTooLarge.
	GetMany(task string, keys [][]byte, maxBytes int) ([][]byte, error)
	Scan(task string, o api.ScanOptions) ([]api.KV, error)
	// Query reads any task's state within q's bound, from this member's
	// copy or another member's. The answer's Served says whose, also with
	// an error when a copy answered (a batch get over its bound). A query
	// no copy meets within its timeout fails with ErrUnavailable; a
	// stateless task's with ErrInvalid.
	Query(ctx context.Context, q api.Query) (api.QueryAnswer, error)
	// Commit appends to the changelog (fenced) and applies locally. The
	// slices of req may alias the request's body: they are valid during
	// the call only.
	Commit(ctx context.Context, task string, req api.CommitRequest) (api.CommitResult, error)
	// Leave starts a graceful leave (idempotent); LeaveStatus reports it.
	Leave(ctx context.Context) (api.LeaveStatus, error)
	LeaveStatus() api.LeaveStatus
	// Group returns the whole group's view.
	Group(ctx context.Context) (api.GroupView, error)
	// Ready returns nil once the member has joined its group and its NATS
	// connection is up.
	Ready() error
}

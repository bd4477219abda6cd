// Package httpapi is the worker-facing HTTP API of the sidecar (chi): the
// worker's assignment with long-polling, releases, state reads and commits,
// leave, health, metrics and the group's view. It declares the Backend it
// needs and the JSON it speaks; it knows nothing of NATS or Pebble.
package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/handoffhq/handoff/httpapi/wire"
)

// Errors a Backend returns (wrapped, with a message a person can act on);
// the API maps each to an HTTP status and a stable code.
var (
	ErrUnknownTask = errors.New("unknown task")         // 404 unknown_task
	ErrNotFound    = errors.New("key not found")        // 404 not_found
	ErrNotOwner    = errors.New("not the active owner") // 409 not_owner
	ErrNotRevoked  = errors.New("task is not revoked")  // 409 not_revoked
	// ErrResume refuses a commit because the task's copy holds a commit of
	// this owner that the worker was not told of (its acknowledgement was
	// lost, or the agent had to replay it): retrying would apply the work
	// twice; the worker restarts the task from the checkpoint in
	// /assignment, which includes that commit.
	ErrResume      = errors.New("resume from the checkpoint") // 409 resume
	ErrInvalid     = errors.New("invalid request")            // 400 invalid
	ErrTooLarge    = errors.New("request too large")          // 413 too_large
	ErrUnavailable = errors.New("temporarily unavailable")    // 503 unavailable
)

// Roles of a task on a member (see wire).
const (
	RoleActive  = wire.RoleActive
	RoleLearner = wire.RoleLearner
	RoleStandby = wire.RoleStandby
)

// Member states (see wire).
const (
	StateJoining = wire.StateJoining
	StateMember  = wire.StateMember
	StateLeaving = wire.StateLeaving
	StateDone    = wire.StateDone
)

// The documents that describe the group outside a member live in wire, so
// that readers of the group (the CLI) need not import the server.
type (
	LearnerProgress = wire.LearnerProgress
	GroupView       = wire.GroupView
	MemberView      = wire.MemberView
	GroupTask       = wire.GroupTask
)

// View is a member's assignment as its worker sees it.
type View struct {
	Member string `json:"member"`
	// Generation is the group generation this view reflects.
	Generation uint64 `json:"generation"`
	// Version rises on every change of this view (a new generation, a task
	// becoming active once its state is current, a leave starting). Pass
	// it back as ?after= to long-poll.
	Version  uint64     `json:"version"`
	State    string     `json:"state"`
	Tasks    []TaskView `json:"tasks"`
	Revoke   []string   `json:"revoke"`
	Shutdown bool       `json:"shutdown"`
}

// TaskView is one task of a View.
type TaskView struct {
	ID       string `json:"id"`
	Role     string `json:"role"`
	Stateful bool   `json:"stateful"`
	Epoch    uint64 `json:"epoch"`
	// Lag is how many changelog messages this member's copy is behind
	// (learners and standbys; 0 for actives).
	Lag uint64 `json:"lag"`
	// Checkpoint is the input position to resume from (actives only).
	Checkpoint []byte `json:"checkpoint,omitempty"`
	// Seq is the changelog sequence this member's copy has applied, the
	// Checkpoint's commit included (stateful actives only). A worker that
	// remembers a commit of its own at this epoch with a higher Seq knows
	// that this view was built before that commit was applied.
	Seq uint64 `json:"seq,omitempty"`
}

// KV is a key and value; both are base64 in JSON, so any bytes are safe.
type KV struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
}

// CommitRequest is the body of POST /tasks/{id}/commit.
type CommitRequest struct {
	Puts    []KV     `json:"puts,omitempty"`
	Deletes [][]byte `json:"deletes,omitempty"`
	// Checkpoint is the input position this commit reaches; empty keeps
	// the previous one.
	Checkpoint []byte `json:"checkpoint,omitempty"`
	// Epoch, when set, must equal the task's current epoch here: a worker
	// that still holds work from an older ownership is refused.
	Epoch uint64 `json:"epoch,omitempty"`
}

// CommitResult acknowledges a commit: it is in the changelog and the store.
type CommitResult struct {
	Task  string `json:"task"`
	Seq   uint64 `json:"seq"`
	Epoch uint64 `json:"epoch"`
}

// ReleaseResult acknowledges a release.
type ReleaseResult struct {
	Task  string `json:"task"`
	Epoch uint64 `json:"epoch"`
	// Seq is the changelog sequence of the task's last commit here.
	Seq uint64 `json:"seq"`
}

// ScanOptions select keys of GET /tasks/{id}/state.
type ScanOptions struct {
	Prefix []byte
	Start  []byte
	Limit  int
}

// LeaveStatus is the progress of a graceful leave.
type LeaveStatus struct {
	State   string     `json:"state"` // as View.State
	Started *time.Time `json:"started,omitempty"`
	// Remaining lists the tasks this member still owns.
	Remaining []string `json:"remaining"`
	// Learners shows how far the members taking over have got.
	Learners []LearnerProgress `json:"learners,omitempty"`
	Shutdown bool              `json:"shutdown"`
}

// Backend is what the API needs from the agent. Implementations are safe
// for concurrent use.
type Backend interface {
	// Assignment returns the current view.
	Assignment() View
	// WaitAssignment returns the view once its Version exceeds after, or
	// the current view when ctx ends.
	WaitAssignment(ctx context.Context, after uint64) View
	// Release records that the worker stopped a revoked task. epoch, when
	// not 0, is the ownership the worker stopped: a release for another
	// epoch than the task's here is refused with ErrNotOwner, so that a run
	// of an earlier ownership never releases a later one.
	Release(ctx context.Context, task string, epoch uint64) (ReleaseResult, error)
	// Get and Scan read an active task's state.
	Get(task string, key []byte) ([]byte, error)
	Scan(task string, o ScanOptions) ([]KV, error)
	// Commit appends to the changelog (fenced) and applies locally.
	Commit(ctx context.Context, task string, req CommitRequest) (CommitResult, error)
	// Leave starts a graceful leave (idempotent); LeaveStatus reports it.
	Leave(ctx context.Context) (LeaveStatus, error)
	LeaveStatus() LeaveStatus
	// Group returns the whole group's view.
	Group(ctx context.Context) (GroupView, error)
	// Ready returns nil once the member has joined its group and its NATS
	// connection is up.
	Ready() error
}

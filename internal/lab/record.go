package lab

import (
	"time"

	"github.com/handoffhq/handoff/api"
)

// Roles of a task on a member, as the recorder sees them: the member's own
// view, told apart with the group's assignment.
const (
	RoleActive    = "active"    // the owner; its worker may commit
	RoleRevoking  = "revoking"  // the owner, asked to stop and release
	RoleRestoring = "restoring" // the new owner, replaying before it can serve
	RoleLearner   = "learner"   // warming up to take the task over
	RoleStandby   = "standby"   // kept warm for failover
)

// Span is a stretch of time during which Member held Role for Task. End is
// zero while the span is open.
type Span struct {
	Task   string    `json:"task"`
	Member string    `json:"member"`
	Role   string    `json:"role"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end,omitzero"`
}

// Kinds of Mark.
const (
	MarkJoin    = "join"    // a member was started
	MarkLeave   = "leave"   // POST /leave was called
	MarkLeft    = "left"    // a member stopped after its leave
	MarkCrash   = "crash"   // a member was crashed
	MarkStop    = "stop"    // a member was stopped without a leave
	MarkRestart = "restart" // a member was started again from its data
	MarkPhase   = "phase"   // a caller's milestone (Text)
)

// Mark is an operation on the group, or a caller's milestone.
type Mark struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	Member string    `json:"member,omitempty"`
	Text   string    `json:"text,omitempty"`
}

// Report is a learner's, standby's or activation's progress report as the
// lab heard it over NATS.
type Report struct {
	Heard time.Time
	api.LearnerProgress
}

// GenChange is when the recorder first saw a member apply Generation.
type GenChange struct {
	At         time.Time `json:"at"`
	Generation uint64    `json:"generation"`
}

// SteadyChange is when the group became steady (every task active on
// exactly one member, its worker running at the task's epoch, and no
// learner, revoke or restore in flight) or stopped being so.
type SteadyChange struct {
	At         time.Time `json:"at"`
	Steady     bool      `json:"steady"`
	Generation uint64    `json:"generation"`
}

// Note is something that happened, in words, for a live view.
type Note struct {
	At   time.Time
	Text string
}

// Package wire holds the JSON documents of the worker API that also
// describe the group to readers outside a member: the group's view, a
// learner's progress, and the names of roles and member states. It has no
// dependencies, so that the CLI and agent/group can speak them without
// importing the HTTP server; httpapi re-exports every name.
package wire

import "time"

// Roles of a task on a member.
const (
	RoleActive  = "active"
	RoleLearner = "learner"
	RoleStandby = "standby"
)

// Member states.
const (
	StateJoining = "joining" // no generation has included this member yet
	StateMember  = "member"
	StateLeaving = "leaving" // leave started; tasks are being handed over
	StateDone    = "done"    // left: owns nothing, may shut down
)

// LearnerProgress is one learner's or standby's progress on a task.
type LearnerProgress struct {
	Task     string `json:"task"`
	Member   string `json:"member"`
	Role     string `json:"role"`
	Applied  uint64 `json:"applied"`
	End      uint64 `json:"end"`
	Lag      uint64 `json:"lag"`
	LagBytes uint64 `json:"lagBytes"`
	// Replayed is how many messages this restore has applied so far.
	Replayed uint64        `json:"replayed"`
	Rate     float64       `json:"rate"` // messages per second
	ETA      time.Duration `json:"eta"`
	Updated  time.Time     `json:"updated"`
}

// GroupView is the whole group as one member sees it (GET /group).
type GroupView struct {
	Group      string            `json:"group"`
	Generation uint64            `json:"generation"`
	Leader     string            `json:"leader"`
	Members    []MemberView      `json:"members"`
	Tasks      []GroupTask       `json:"tasks"`
	Progress   []LearnerProgress `json:"progress,omitempty"`
}

// MemberView is one member in a GroupView.
type MemberView struct {
	ID       string   `json:"id"`
	Addr     string   `json:"addr,omitempty"`
	Zone     string   `json:"zone,omitempty"`
	Capacity int      `json:"capacity"`
	State    string   `json:"state"`
	Active   []string `json:"active"`
	Learning []string `json:"learning,omitempty"`
	Standby  []string `json:"standby,omitempty"`
}

// GroupTask is one task in a GroupView.
type GroupTask struct {
	ID       string   `json:"id"`
	Stateful bool     `json:"stateful"`
	Active   string   `json:"active"`
	Epoch    uint64   `json:"epoch"`
	Revoking string   `json:"revoking,omitempty"` // target of a pending revoke
	Learners []string `json:"learners,omitempty"`
	Standbys []string `json:"standbys,omitempty"`
	// SnapshotSeq and SnapshotAge describe the task's newest snapshot.
	SnapshotSeq uint64        `json:"snapshotSeq,omitempty"`
	SnapshotAge time.Duration `json:"snapshotAge,omitempty"`
}

// Package api is handoff's vocabulary, shared by the agent, its HTTP
// transport (httpapi), its clients and the CLI: the roles of a task, the
// states of a member and of its worker, the documents a worker reads and
// writes (its assignment, commits, releases, state pages, a leave's
// progress, the group's view), the stable error codes and the error
// sentinels a backend returns and a client matches. api/openapi.yaml
// describes their JSON. It imports no other handoff package and nothing of
// NATS, Pebble or chi, so that anything speaking to or about a member can
// link it alone.
package api

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

// Worker states of a MemberView (the values of assign.WorkerState).
const (
	WorkerAttached = "attached" // polling GET /assignment; may own active tasks
	WorkerDetached = "detached" // not polling; keeps its actives, gets no new one
	WorkerLost     = "lost"     // detached for the worker timeout; its actives were released
)

package assign

import (
	"encoding/json"
	"fmt"
	"time"
)

// Mode says when caught-up learners are promoted.
type Mode string

const (
	// Eager promotes each learner in the generation after it has caught up.
	Eager Mode = "eager"
	// Stable promotes the learners of a round together once all of them have
	// caught up, or, after Config.StableMaxWait, each one as it catches up.
	Stable Mode = "stable"
	// Cold moves a stateful task at once, with no learner: the new owner
	// replays the task's changelog before it serves. It is what a plain
	// rebalance does, kept as the baseline 'handoff-lab bench' compares with.
	Cold Mode = "cold"
)

// Duration is a time.Duration that reads and writes JSON and YAML as a Go
// duration string ("30s"), so that stored configs and plan files stay legible.
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string such as "1m30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes d as a duration string (YAML and flags).
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a duration string (YAML and flags).
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Task is a unit of work. Only stateful tasks have a changelog, learners and
// standbys.
type Task struct {
	ID       string `json:"id"`
	Stateful bool   `json:"stateful"`
}

// Member is a live member of the group as the leader sees it: its record in
// the group's KV bucket. Dead members are simply absent from Input.Members.
type Member struct {
	ID string `json:"id"`
	// Capacity weighs the member's share of tasks; values below 1 count as 1.
	Capacity int    `json:"capacity,omitempty"`
	Zone     string `json:"zone,omitempty"`
	Leaving  bool   `json:"leaving,omitempty"`
	// Positions is how far the member's local copy of each stateful task
	// reaches: the changelog sequence it has applied. Tasks it holds no state
	// for are absent.
	Positions map[string]uint64 `json:"positions,omitempty"`
	// Released acknowledges revokes: the member's worker stopped the task and
	// made its last commit at changelog sequence Seq while the task was at
	// Epoch. A release whose epoch is not the task's current epoch, or
	// that was made before the revoke it would complete was issued, is
	// stale and ignored.
	Released map[string]Release `json:"released,omitempty"`
	// DirectHandoff says the member's agent hands a task over through its
	// changelog: its release entry names the successor, which takes over
	// from it without the leader (docs/ARCHITECTURE.md). The leader asks for
	// such hand-offs only when every live member says so, since a member
	// that does not cannot read a release entry.
	DirectHandoff bool `json:"directHandoff,omitempty"`
	// Takeovers are the tasks this member took over directly from a release
	// entry that named it, at the epoch the entry gave, which no generation
	// has recorded yet.
	Takeovers map[string]Takeover `json:"takeovers,omitempty"`
	// Worker is the state of the worker next to the member's agent. A
	// member whose worker is not attached may warm tasks (learners,
	// standbys) but gets no new active task; one whose worker is lost has
	// its active tasks moved away. "" counts as WorkerAttached.
	Worker WorkerState `json:"worker,omitempty"`
}

// WorkerState is whether a member's worker is there to run active tasks.
type WorkerState string

// The states of a member's worker.
const (
	// WorkerAttached: a long-poll of /assignment is open, or one ended less
	// than a short grace ago. The member may own active tasks.
	WorkerAttached WorkerState = "attached"
	// WorkerDetached: no worker has attached yet, or it left less than the
	// worker timeout ago. The member keeps the actives it has but gets no
	// new one (no promotion, no failover, no stateless task).
	WorkerDetached WorkerState = "detached"
	// WorkerLost: the worker has been detached for the worker timeout. Its
	// agent released its active tasks on its behalf; they move away at once.
	WorkerLost WorkerState = "lost"
)

// Release is a member's acknowledgement that it stopped a revoked task.
type Release struct {
	Epoch uint64    `json:"epoch"`
	Seq   uint64    `json:"seq"`
	At    time.Time `json:"at"`
	// Generation is the member's generation when its worker released: a
	// release answers only a revoke issued at or before it. A revoke that
	// is cancelled before the leader saw its release, and issued again at
	// the same epoch, must wait for a new release: the worker served the
	// task again in between. 0 (a member that predates the field) matches
	// any revoke of its epoch.
	Generation uint64 `json:"generation,omitempty"`
	// To and ToEpoch are set when the owner handed the task over directly:
	// its release entry in the changelog names To as the owner at ToEpoch.
	// Such a release is final: the task is To's from then on, whatever
	// the leader's plan said meanwhile.
	To      string `json:"to,omitempty"`
	ToEpoch uint64 `json:"toEpoch,omitempty"`
}

// Takeover is a member's report that it took a task over directly: the
// release entry at changelog sequence Seq named it the owner at Epoch.
type Takeover struct {
	Epoch uint64    `json:"epoch"`
	Seq   uint64    `json:"seq"`
	At    time.Time `json:"at"`
}

// answers reports whether r acknowledges revoke rv of a task at epoch.
func (r Release) answers(rv *Revoke, epoch uint64) bool {
	if r.Epoch != epoch {
		return false
	}
	return rv == nil || r.Generation == 0 || r.Generation >= rv.Generation
}

// Assignment is the state the leader publishes, one version per generation.
// It is both the assignor's input (the current assignment) and its output.
type Assignment struct {
	Generation uint64                     `json:"generation"`
	Tasks      map[string]*TaskAssignment `json:"tasks"`
	// Leaving records when the leader first saw each leaving member, so that
	// the leave timeout survives a change of leader.
	Leaving map[string]time.Time `json:"leaving,omitempty"`
	// Round is the stable-mode round of learners in flight, if any.
	Round *Round `json:"round,omitempty"`
}

// TaskAssignment is one task's placement.
type TaskAssignment struct {
	// Active is the member that processes the task; "" while no live
	// member can take it.
	Active string `json:"active,omitempty"`
	// Epoch rises each time Active changes; it fences stale owners.
	Epoch uint64 `json:"epoch"`
	// Minted is the highest epoch the leader has given out for the task,
	// when it is above Epoch: a revoke's epoch that was never taken (the
	// revoke was cancelled). Every epoch is given to one member only, so
	// the next one is above it (see mintEpoch).
	Minted uint64 `json:"minted,omitempty"`
	// Revoke is set while Active is being asked to stop the task so that
	// Revoke.Target can take it over.
	Revoke *Revoke `json:"revoke,omitempty"`
	// HandoffSeq is the changelog sequence of the previous owner's last
	// commit when Active took over from a release; the new owner applies up
	// to it before it serves. Zero when unknown (failover, forced move).
	HandoffSeq uint64 `json:"handoffSeq,omitempty"`
	// HandoffAt is when the previous owner released the task (its
	// Release.At), set with HandoffSeq; the new owner measures the
	// hand-off pause from it.
	HandoffAt time.Time `json:"handoffAt,omitzero"`
	// Learners are members warming up to take the task over.
	Learners []Learner `json:"learners,omitempty"`
	// Standbys keep the task warm for failover.
	Standbys []string `json:"standbys,omitempty"`
	// StandbyMove is set while a standby moves warm: To was added to
	// Standbys to replace From, which stays a standby until To has caught
	// up. It is recorded in the assignment so that a new leader finishes
	// the move the old one started.
	StandbyMove *StandbyMove `json:"standbyMove,omitempty"`
}

// StandbyMove is a standby moving from one member to another (see
// TaskAssignment.StandbyMove).
type StandbyMove struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Revoke is a pending move of a task away from its active owner.
type Revoke struct {
	Target string    `json:"target"`
	Since  time.Time `json:"since"`
	// Generation is the generation that issued the revoke (0 from leaders
	// that predate the field).
	Generation uint64 `json:"generation,omitempty"`
	// Reason is a short, stable word: "balance", "leave", "leave-timeout".
	Reason string `json:"reason"`
	// Epoch, when set, is the epoch Target takes, minted for it when the
	// revoke was issued, and asks for a direct hand-off: the owner's
	// release entry names Target at Epoch, and Target takes the task over
	// from the changelog without waiting for the leader. 0 (a group with a
	// member that cannot read release entries, a leader that predates the
	// field, a revoke to nobody) asks for the hand-off through the leader.
	Epoch uint64 `json:"epoch,omitempty"`
}

// Learner is a member warming a task up.
type Learner struct {
	Member string    `json:"member"`
	Since  time.Time `json:"since"`
}

// Round is a stable-mode batch of learners promoted together.
type Round struct {
	ID      uint64    `json:"id"`
	Started time.Time `json:"started"`
	Tasks   []string  `json:"tasks"`
}

// Input is everything the assignor looks at. It holds no clocks but Now.
type Input struct {
	Config  Config                       `json:"config"`
	Now     time.Time                    `json:"now"`
	Members []Member                     `json:"members"`
	Current Assignment                   `json:"current"`
	Lags    map[string]map[string]uint64 `json:"lags,omitempty"` // task -> member -> lag in messages, as learners and standbys report it
}

// MoveKind names what happened to a task in a plan.
type MoveKind string

// The kinds of Move.
const (
	MoveAssign      MoveKind = "assign"       // an unowned task got an owner
	MoveFailover    MoveKind = "failover"     // the owner died; a live member took over
	MoveLearnerAdd  MoveKind = "learner-add"  // a learner started warming up
	MoveLearnerDrop MoveKind = "learner-drop" // a learner was no longer needed
	MoveRevoke      MoveKind = "revoke"       // the owner was asked to release
	MovePromote     MoveKind = "promote"      // ownership moved to the target after release or timeout
	MoveStandbyAdd  MoveKind = "standby-add"  // a standby was placed
	MoveStandbyDrop MoveKind = "standby-drop" // a standby was removed
	MoveUnassign    MoveKind = "unassign"     // no live member can own the task
	// MoveRevokeCancel withdraws a pending revoke because its target died or
	// started leaving; the owner keeps the task.
	MoveRevokeCancel MoveKind = "revoke-cancel"
)

// Move explains one change the plan makes to a task.
type Move struct {
	Task   string   `json:"task"`
	Kind   MoveKind `json:"kind"`
	From   string   `json:"from,omitempty"`
	To     string   `json:"to,omitempty"`
	Reason string   `json:"reason"`
}

// Result is the assignor's output.
type Result struct {
	// Assignment is the next state. Its Generation is Current.Generation+1
	// when anything changed, else Current.Generation.
	Assignment Assignment `json:"assignment"`
	Changed    bool       `json:"changed"`
	Moves      []Move     `json:"moves,omitempty"`
	// Shutdown lists the leaving members that own nothing and may exit.
	Shutdown []string `json:"shutdown,omitempty"`
	// NextDeadline is when the plan would change with time alone (a release,
	// leave or stable-round timeout); zero if never, and then left out of
	// the JSON. The leader plans again then even if nothing else happens.
	NextDeadline time.Time `json:"nextDeadline,omitzero"`
}

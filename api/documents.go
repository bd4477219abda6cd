package api

import "time"

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

// ScanResult is the body of GET /tasks/{id}/state. Next, when set, is the
// key to pass as start (start_b64) to read the following page.
type ScanResult struct {
	Items []KV   `json:"items"`
	Next  []byte `json:"next,omitempty"`
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
	// Worker is the state of the member's worker: WorkerAttached,
	// WorkerDetached or WorkerLost; "" for a member that does not require
	// one (--require-worker=false). WorkerSince is, for a worker detached
	// or lost, when its last GET /assignment ended.
	Worker      string     `json:"worker,omitempty"`
	WorkerSince *time.Time `json:"workerSince,omitempty"`
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

// GetRequest is the body of POST /tasks/{id}/get: the keys to read.
type GetRequest struct {
	Keys [][]byte `json:"keys"`
}

// GetResult answers a GetRequest: Values[i] is the value of Keys[i], nil
// (JSON null) when the key is absent.
type GetResult struct {
	Values [][]byte `json:"values"`
}

// DefaultMaxGetKeys is the most keys an agent with its default limits
// takes in one GetRequest; a client splits a longer batch.
const DefaultMaxGetKeys = 10000

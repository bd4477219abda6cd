package lab

import (
	"sort"
	"time"

	"github.com/handoffhq/handoff/api"
)

// Snapshot is the group as of the recorder's last sample, for a live view.
type Snapshot struct {
	At         time.Time
	Generation uint64
	Leader     string
	Steady     bool
	Members    []MemberSnapshot
	Tasks      []TaskSnapshot
	// Committed is how many input messages stateful tasks have committed.
	Committed uint64
}

// MemberSnapshot is one member in a Snapshot.
type MemberSnapshot struct {
	ID string
	// State is the lab's (Member*); GroupState the agent's (joining,
	// member, leaving, done), empty when the member does not run.
	State      string
	GroupState string
	Active     []string
	Learning   []string
	Standby    []string
}

// TaskSnapshot is one task in a Snapshot.
type TaskSnapshot struct {
	ID       string
	Stateful bool
	// Owner is the member holding the task as active, revoking or
	// restoring, and OwnerRole which of them; empty when none.
	Owner     string
	OwnerRole string
	// Running is the member whose worker runs the task; empty while the
	// task is paused, since PausedSince (a release or a crash).
	Running     string
	PausedSince time.Time
	PausedFrom  string // the member that released the task, or crashed
	// Learners are the members warming the task up.
	Learners []LearnerSnapshot
}

// LearnerSnapshot is a learner (or a restoring owner) with its latest
// progress, if it has reported.
type LearnerSnapshot struct {
	Member   string
	Role     string
	Progress *api.LearnerProgress
}

// Snapshot returns the group as of the last sample.
func (r *Recorder) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.last
	snap := Snapshot{At: s.at, Generation: s.gen, Leader: s.leader, Steady: s.steady, Committed: r.committedRecords}
	byMember := map[string]*MemberSnapshot{}
	for _, m := range s.members {
		ms := MemberSnapshot{ID: m.id, State: m.state}
		if m.running {
			ms.GroupState = m.view.State
		}
		snap.Members = append(snap.Members, ms)
	}
	for i := range snap.Members {
		byMember[snap.Members[i].ID] = &snap.Members[i]
	}
	tasks := map[string]*TaskSnapshot{}
	for _, t := range r.tasks {
		ts := TaskSnapshot{ID: t.ID, Stateful: t.Stateful}
		if rt, ok := r.running[t.ID]; ok {
			ts.Running = rt.member
		} else if h, ok := r.released[t.ID]; ok {
			ts.PausedSince, ts.PausedFrom = h.at, h.member
		} else if h, ok := r.lost[t.ID]; ok {
			ts.PausedSince, ts.PausedFrom = h.at, h.member
		}
		snap.Tasks = append(snap.Tasks, ts)
	}
	for i := range snap.Tasks {
		tasks[snap.Tasks[i].ID] = &snap.Tasks[i]
	}
	keys := make([]pair, 0, len(s.roles))
	for k := range s.roles {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].task != keys[j].task {
			return keys[i].task < keys[j].task
		}
		return memberLess(keys[i].member, keys[j].member)
	})
	for _, k := range keys {
		role := s.roles[k]
		ts, ms := tasks[k.task], byMember[k.member]
		if ts == nil || ms == nil {
			continue
		}
		switch role {
		case RoleActive, RoleRevoking, RoleRestoring:
			ts.Owner, ts.OwnerRole = k.member, role
			ms.Active = append(ms.Active, k.task)
		case RoleLearner:
			ms.Learning = append(ms.Learning, k.task)
		case RoleStandby:
			ms.Standby = append(ms.Standby, k.task)
		}
		if role == RoleLearner || role == RoleRestoring {
			ls := LearnerSnapshot{Member: k.member, Role: role}
			if rep, ok := r.latest[k]; ok {
				p := rep.LearnerProgress
				ls.Progress = &p
			}
			ts.Learners = append(ts.Learners, ls)
		}
	}
	return snap
}

package agent

import (
	"regexp"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
)

// Keys of the group's KV bucket (see docs/ARCHITECTURE.md).
const (
	keyConfig    = "config"
	keyLease     = "lease"
	keyGen       = "gen"
	prefixMember = "members."
	prefixEntry  = "assign."
)

// BucketName is the name of group's KV bucket.
func BucketName(group string) string { return "handoff_" + group }

// progressSubject is where member publishes its learners' and standbys'
// progress (core NATS).
func progressSubject(group, member string) string {
	return "handoff." + group + ".progress." + member
}

func progressWildcard(group string) string { return "handoff." + group + ".progress.>" }

var memberIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidMemberID reports whether id can name a member: 1 to 128 letters,
// digits, '-' or '_' (it is a token of KV keys and NATS subjects).
func ValidMemberID(id string) bool { return memberIDPattern.MatchString(id) }

// memberRecord is a member's record in the KV bucket, kept alive by
// heartbeats under a per-key TTL of the session timeout.
type memberRecord struct {
	ID string `json:"id"`
	// Incarnation changes with every process start.
	Incarnation string    `json:"incarnation"`
	Addr        string    `json:"addr,omitempty"`
	Zone        string    `json:"zone,omitempty"`
	Capacity    int       `json:"capacity"`
	Leaving     bool      `json:"leaving,omitempty"`
	Started     time.Time `json:"started"`
	// Positions is the applied changelog sequence of each local copy.
	Positions map[string]uint64 `json:"positions,omitempty"`
	// Released acknowledges revokes (see assign.Member.Released).
	Released map[string]assign.Release `json:"released,omitempty"`
	// Generation is the last generation the member has applied.
	Generation uint64 `json:"generation"`
}

func (r memberRecord) assignMember() assign.Member {
	return assign.Member{
		ID:        r.ID,
		Capacity:  r.Capacity,
		Zone:      r.Zone,
		Leaving:   r.Leaving,
		Positions: r.Positions,
		Released:  r.Released,
	}
}

// leaseRecord is the leader's lease.
type leaseRecord struct {
	Member      string    `json:"member"`
	Incarnation string    `json:"incarnation"`
	Since       time.Time `json:"since"`
}

// genRecord is the generation record: the single point at which a
// generation is published. It names the revision of every member's entry.
type genRecord struct {
	Generation uint64            `json:"generation"`
	Leader     string            `json:"leader"`
	Published  time.Time         `json:"published"`
	Entries    map[string]uint64 `json:"entries"`
	// Unassigned holds tasks no live member owns, with their epochs.
	Unassigned map[string]*assign.TaskAssignment `json:"unassigned,omitempty"`
	Leaving    map[string]time.Time              `json:"leaving,omitempty"`
	Round      *assign.Round                     `json:"round,omitempty"`
	Shutdown   []string                          `json:"shutdown,omitempty"`
}

// memberEntry is one member's part of a generation. It carries no
// generation number, so an entry that did not change is not rewritten.
type memberEntry struct {
	Member string `json:"member"`
	// Tasks holds the full placement of every task this member owns.
	Tasks    map[string]*assign.TaskAssignment `json:"tasks,omitempty"`
	Learning []string                          `json:"learning,omitempty"`
	Standby  []string                          `json:"standby,omitempty"`
	Leaving  bool                              `json:"leaving,omitempty"`
	Shutdown bool                              `json:"shutdown,omitempty"`
}

// progressMsg is one learner's or standby's progress on a task.
type progressMsg struct {
	Member   string        `json:"member"`
	Task     string        `json:"task"`
	Role     string        `json:"role"`
	Applied  uint64        `json:"applied"`
	End      uint64        `json:"end"`
	Lag      uint64        `json:"lag"`
	LagBytes uint64        `json:"lagBytes"`
	Replayed uint64        `json:"replayed"`
	Rate     float64       `json:"rate"`
	ETA      time.Duration `json:"eta"`
	At       time.Time     `json:"at"`
	// Generation is the generation the member had applied when it
	// reported.
	Generation uint64 `json:"generation"`
}

// pairKey names a task on a member.
type pairKey struct{ task, member string }

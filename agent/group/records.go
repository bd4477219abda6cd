// Package group is the one home of a group's data model in NATS: the keys
// of its KV bucket and the records stored under them, their encoding, the
// leader's lease and the writes fenced on it, publishing and reading a
// generation, the member records and the claim on a member ID that guards
// their writes, the progress subjects and their messages, and reading or
// watching the whole group. It exists so that the
// agent's runtime (package agent) and the readers of a group (the CLI's
// status, group and plan commands) share one definition of what lives in
// NATS, and so that a reader needs none of the runtime. It imports no
// runtime: neither agent nor the HTTP server.
package group

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
)

// Keys of the group's KV bucket (see docs/ARCHITECTURE.md).
const (
	KeyConfig     = "config"
	KeyLease      = "lease"
	KeyGeneration = "gen"
	// KeyIndex holds the full record of a generation published compact
	// (GenerationRecord.Compact): the revision of every member's
	// assignment, for a new leader and a member that missed generations.
	KeyIndex = "genindex"
	// PrefixMember + id holds a MemberRecord.
	PrefixMember = "members."
	// PrefixAssignment + id holds a MemberAssignment. The stored prefix
	// predates the name and stays, so that groups keep working.
	PrefixAssignment = "assign."
	// PrefixCommitted + task holds a CommittedRecord: a worker has
	// committed to the task (committed.go).
	PrefixCommitted = "committed."
)

// BucketName is the name of group's KV bucket.
func BucketName(group string) string { return "handoff_" + group }

// keySubject is the subject a key of group's bucket is stored on: writes
// that need headers (a TTL, a fence) publish to it.
func keySubject(group, key string) string { return "$KV." + BucketName(group) + "." + key }

var memberIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidMemberID reports whether id can name a member: 1 to 128 letters,
// digits, '-' or '_' (it is a token of KV keys and NATS subjects).
func ValidMemberID(id string) bool { return memberIDPattern.MatchString(id) }

// MemberRecord is a member's record in the KV bucket, kept alive by
// heartbeats under a per-key TTL of the session timeout.
type MemberRecord struct {
	ID string `json:"id"`
	// Incarnation changes with every process start.
	Incarnation string `json:"incarnation"`
	// Owner names the data dir the agent runs on: an agent restarted on
	// it is the same member (see ClaimMember).
	Owner string `json:"owner,omitempty"`
	// Host is the name of the agent's machine, to name a holder of the
	// member ID in an error.
	Host     string    `json:"host,omitempty"`
	Addr     string    `json:"addr,omitempty"`
	Zone     string    `json:"zone,omitempty"`
	Capacity int       `json:"capacity"`
	Leaving  bool      `json:"leaving,omitempty"`
	Started  time.Time `json:"started"`
	// Positions is the applied changelog sequence of each local copy.
	Positions map[string]uint64 `json:"positions,omitempty"`
	// Released acknowledges revokes (see assign.Member.Released).
	Released map[string]assign.Release `json:"released,omitempty"`
	// DirectHandoff and Takeovers: see assign.Member.
	DirectHandoff bool                       `json:"directHandoff,omitempty"`
	Takeovers     map[string]assign.Takeover `json:"takeovers,omitempty"`
	// CompactGenerations says the member reads compact generation records
	// (GenerationRecord.Compact) and watches its own assignment.
	CompactGenerations bool `json:"compactGenerations,omitempty"`
	// Generation is the last generation the member has applied.
	Generation uint64 `json:"generation"`
	// Worker is the state of the member's worker ("" when the member
	// requires none, which counts as attached); WorkerSince is, for a
	// detached or lost worker, when its last poll ended.
	Worker      assign.WorkerState `json:"worker,omitempty"`
	WorkerSince time.Time          `json:"workerSince,omitzero"`
}

func (r MemberRecord) AssignMember() assign.Member {
	return assign.Member{
		ID:        r.ID,
		Capacity:  r.Capacity,
		Zone:      r.Zone,
		Leaving:   r.Leaving,
		Positions: r.Positions,
		Released:  r.Released,
		Worker:    r.Worker,

		DirectHandoff: r.DirectHandoff,
		Takeovers:     r.Takeovers,
	}
}

// LeaseRecord is the leader's lease.
type LeaseRecord struct {
	Member      string    `json:"member"`
	Incarnation string    `json:"incarnation"`
	Since       time.Time `json:"since"`
}

// GenerationRecord is the generation record (key KeyGeneration): the single
// point at which a generation is published. In full, it names the revision
// of every member's assignment. Published compact (Compact), what every
// member receives holds only the generation, its leader, term and
// candidates, and the revision of the full record under KeyIndex: a member
// learns of its own assignment from the assignment's key, which it
// watches (see docs/ARCHITECTURE.md, "What a member reads").
type GenerationRecord struct {
	Generation uint64    `json:"generation"`
	Leader     string    `json:"leader"`
	Published  time.Time `json:"published"`
	// Assignments names the KV revision of each member's MemberAssignment
	// (key PrefixAssignment + member). Its JSON name predates the Go name
	// and stays, so that members of different versions read each other.
	Assignments map[string]uint64 `json:"entries"`
	// Unassigned holds tasks no live member owns, with their epochs.
	Unassigned map[string]*assign.TaskAssignment `json:"unassigned,omitempty"`
	Leaving    map[string]time.Time              `json:"leaving,omitempty"`
	Round      *assign.Round                     `json:"round,omitempty"`
	Shutdown   []string                          `json:"shutdown,omitempty"`
	// Incoming names, per member, the tasks a direct revoke is handing
	// over to it (Incoming): a member learns from the record it reads
	// anyway that a task is about to be its own, although its assignment
	// did not change. A hint for the member's priorities, nothing of
	// ownership (the release entry decides).
	Incoming map[string][]string `json:"incoming,omitempty"`
	// Candidates name the members besides the leader that watch the
	// lease, to campaign as soon as it ends; the others look at it only
	// now and then (see docs/ARCHITECTURE.md). None named (a leader that
	// predates them, or a group of one) means every member watches.
	Candidates []string `json:"candidates,omitempty"`
	// Term is the revision at which the leader won its lease: every
	// assignment it writes carries it (MemberAssignment.Term).
	Term uint64 `json:"term,omitempty"`
	// Compact says the record was published compact: Assignments,
	// Unassigned, Leaving, Round and Shutdown are in the full record at
	// revision Index of KeyIndex (ReadGeneration reads it).
	Compact bool   `json:"-"`
	Index   uint64 `json:"index,omitempty"`
}

// compactEntries stands in a compact record for the assignments' revisions:
// a string where an earlier version expects a map, so that an agent of an
// earlier version fails to decode the record (it logs and ignores it, and
// cannot lead from it) instead of reading a generation that assigns
// nothing. The leader publishes compact only while every live member's
// record says it reads compact generations.
const compactEntries = "compact"

// generationJSON is a GenerationRecord as it is stored.
type generationJSON struct {
	generationFields
	Entries json.RawMessage `json:"entries"`
}

type generationFields GenerationRecord

// MarshalJSON encodes g, compact or in full.
func (g GenerationRecord) MarshalJSON() ([]byte, error) {
	entries, err := json.Marshal(g.Assignments)
	if g.Compact {
		entries, err = json.Marshal(compactEntries)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(generationJSON{generationFields(g), entries})
}

// UnmarshalJSON decodes a record of either form.
func (g *GenerationRecord) UnmarshalJSON(b []byte) error {
	var w generationJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*g = GenerationRecord(w.generationFields)
	var marker string
	if json.Unmarshal(w.Entries, &marker) == nil {
		if marker != compactEntries {
			return fmt.Errorf("generation record: entries %q", marker)
		}
		g.Compact = true
		return nil
	}
	if len(w.Entries) > 0 && string(w.Entries) != "null" {
		return json.Unmarshal(w.Entries, &g.Assignments)
	}
	return nil
}

// Candidates is how many members besides the leader a generation names to
// watch the lease.
const Candidates = 3

// IsCandidate reports whether g asks member to watch the lease.
func (g GenerationRecord) IsCandidate(member string) bool {
	return len(g.Candidates) == 0 || slices.Contains(g.Candidates, member)
}

// MemberAssignment is one member's part of a generation (key
// PrefixAssignment + member). One that did not change is not rewritten:
// Generation and Term say when it was written (the generation it was
// written for, the leader's term), and do not count as a change.
type MemberAssignment struct {
	Member     string `json:"member"`
	Generation uint64 `json:"generation,omitempty"`
	Term       uint64 `json:"term,omitempty"`
	// Removed says the member is no longer in the group: written once, in
	// a compact generation, so that a member that missed its removal
	// (paused past its session) learns it from its watch.
	Removed bool `json:"removed,omitempty"`
	// Tasks holds the full placement of every task this member owns.
	Tasks    map[string]*assign.TaskAssignment `json:"tasks,omitempty"`
	Learning []string                          `json:"learning,omitempty"`
	Standby  []string                          `json:"standby,omitempty"`
	Leaving  bool                              `json:"leaving,omitempty"`
	Shutdown bool                              `json:"shutdown,omitempty"`
}

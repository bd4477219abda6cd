package api

import "time"

// Queries read any task's state from any member: from the member's own
// copy when it meets the query's bound, or from another member's copy,
// asked over NATS. docs/api.md ("Queries") says what each bound promises.

// Bound is how current a query's answer must be. The zero Bound is the
// default: the answer reflects every commit acknowledged before the query
// arrived.
type Bound struct {
	// MinSeq, when not 0, accepts a copy that has applied the task's
	// changelog up to at least this sequence (a commit's seq: the caller
	// reads its own writes).
	MinSeq uint64
	// MaxLag, when Lagged is set, accepts a copy at most MaxLag changelog
	// messages behind the task's end, as the copy last heard from the
	// server (standbys and learners answer).
	MaxLag uint64
	Lagged bool
}

// Latest reports whether b is the default bound.
func (b Bound) Latest() bool { return b.MinSeq == 0 && !b.Lagged }

// QueryKind is what a query reads.
type QueryKind uint8

// Kinds of query, as the worker's read routes.
const (
	QueryGet     QueryKind = 1 // one key: GET /query/tasks/{id}/state/{key}
	QueryGetMany QueryKind = 2 // many keys: POST /query/tasks/{id}/get
	QueryScan    QueryKind = 3 // a range: GET /query/tasks/{id}/state
)

// Query is one query of a task's state.
type Query struct {
	Kind  QueryKind
	Task  string
	Bound Bound
	// Keys: the key of a get, the keys of a batch get.
	Keys [][]byte
	// MaxBytes bounds the values of a batch get (0: no bound).
	MaxBytes int
	// Scan selects a scan's range.
	Scan ScanOptions
	// Timeout bounds how long the query waits for a copy that meets its
	// bound; 0 means DefaultQueryTimeout.
	Timeout time.Duration
}

// Query timeouts: DefaultQueryTimeout when a query names none, and at
// most MaxQueryTimeout.
const (
	DefaultQueryTimeout = 5 * time.Second
	MaxQueryTimeout     = 60 * time.Second
)

// Served says which copy answered a query.
type Served struct {
	// Member is the member whose copy answered.
	Member string
	// Role is the task's role on that member: RoleActive, RoleLearner,
	// RoleStandby, or RoleCopy for a copy kept without a role (a released
	// or moved task's).
	Role string
	// Seq is the changelog sequence the copy had applied: the answer is
	// the task's state after the changelog up to Seq, exactly.
	Seq uint64
	// Routed is set when the member asked did not answer from its own
	// copy but asked the group over NATS.
	Routed bool
}

// RoleCopy is the role of a copy a member keeps of a task it has no role
// for (it released or moved the task); it answers queries it meets.
const RoleCopy = "copy"

// QueryAnswer answers a Query. A get's Values has one item, nil when the
// key is absent; a batch get's has one per key, in order; a scan's items
// are in Items.
type QueryAnswer struct {
	Served
	Values [][]byte
	Items  []KV
}

// Headers of a query's answer, on every answer that a copy gave (200, and
// the 404 of an absent key): who served it, its role and its applied
// sequence, and whether the member asked routed it.
const (
	HeaderServedBy = "Handoff-Served-By"
	HeaderRole     = "Handoff-Role"
	HeaderSeq      = "Handoff-Seq"
	HeaderRouted   = "Handoff-Routed"
)

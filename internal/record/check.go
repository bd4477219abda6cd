package record

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/countworker"
)

// HistoryKeyPrefix starts the keys of a pre-loaded history (internal/lab's
// Preload), which the generator's keys (InputKey) never do: the final
// check counts them apart from the input.
const HistoryKeyPrefix = "h"

// Want is what a task's changelog must replay to.
type Want struct {
	// Counts is how often each key occurs in the task's input up to End,
	// the input sequence of its last message (0: none).
	Counts map[string]uint64
	End    uint64
	// HistoryKeys is how many pre-loaded keys (HistoryKeyPrefix) the state
	// must hold; -1 skips the check.
	HistoryKeys int
}

// TaskCheck is what the final check found in one stateful task's
// changelog.
type TaskCheck struct {
	Task    string `json:"task"`
	Commits int    `json:"commits"`
	Markers int    `json:"markers"`
	// Releases counts the release entries: the direct hand-offs.
	Releases int `json:"releases"`
	// Violations break the one-writer chain (CheckChain).
	Violations []string `json:"violations,omitempty"`
	// Missing counts acknowledged commits absent from the changelog,
	// Stale the commits acknowledged to an owner after a newer one had
	// taken the task over (AckedAfterTakeover).
	Missing int `json:"missing"`
	Stale   int `json:"stale"`
	// Acks is how many acknowledged commits the check was given: with
	// none, Missing and Stale say nothing.
	Acks int `json:"acks"`
	// Checkpoint is the input sequence the replayed state reaches, Input
	// the last one published; Counted is how many input messages the
	// replayed counts stand for.
	Checkpoint uint64 `json:"checkpoint"`
	Input      uint64 `json:"input"`
	Counted    uint64 `json:"counted"`
	// Mismatches describe how the replayed state differs from the input.
	Mismatches []string `json:"mismatches,omitempty"`
	// HistoryKeys is how many pre-loaded keys the replay holds.
	HistoryKeys int  `json:"historyKeys"`
	Exact       bool `json:"exact"`
}

// CheckTask is the final check of a counter's task: its changelog recs
// form one chain of owners; no commit in acks (those its workers were told
// succeeded) is missing from it or was acknowledged after a newer owner
// took the task over; and replaying it gives the counts of want, with the
// checkpoint at want.End and want.HistoryKeys pre-loaded keys. A checker
// that saw no worker's acknowledgements passes none.
func CheckTask(task string, recs []changelog.Record, acks []Acked, want Want) TaskCheck {
	chain := CheckChain(task, recs)
	tc := TaskCheck{Task: task, Commits: chain.Commits, Markers: chain.Markers, Releases: chain.Releases,
		Violations: chain.Violations, Input: want.End, Acks: len(acks)}
	missing, stale := MissingAcks(recs, acks), AckedAfterTakeover(recs, acks)
	tc.Missing, tc.Stale = len(missing), len(stale)
	if len(missing) > 0 {
		tc.Mismatches = append(tc.Mismatches, fmt.Sprintf("%d acknowledged commits missing from the changelog, e.g. %+v", len(missing), missing[0]))
	}
	if len(stale) > 0 {
		tc.Mismatches = append(tc.Mismatches, fmt.Sprintf("%d commits acknowledged to a stale owner after a newer epoch began, e.g. %+v", len(stale), stale[0]))
	}
	st := changelog.Replay(recs)
	cp, err := countworker.DecodeCheckpoint(st.Checkpoint)
	if err != nil {
		tc.Mismatches = append(tc.Mismatches, err.Error())
	}
	tc.Checkpoint = cp
	if cp != want.End {
		tc.Mismatches = append(tc.Mismatches, fmt.Sprintf("counted up to input seq %d, the input ends at %d", cp, want.End))
	}
	counted := make(map[string][]byte, len(st.Data))
	for k, v := range st.Data {
		if strings.HasPrefix(k, HistoryKeyPrefix) {
			tc.HistoryKeys++
			continue
		}
		counted[k] = v
		if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			tc.Counted += n
		}
	}
	tc.Mismatches = append(tc.Mismatches, CompareCounts(counted, want.Counts)...)
	if want.HistoryKeys >= 0 && tc.HistoryKeys != want.HistoryKeys {
		tc.Mismatches = append(tc.Mismatches, fmt.Sprintf("%d pre-loaded keys, want %d", tc.HistoryKeys, want.HistoryKeys))
	}
	tc.Exact = len(tc.Mismatches) == 0 && len(tc.Violations) == 0
	return tc
}

// Problems lists everything the check found wrong, chain violations
// first; none if the task is exact.
func (tc TaskCheck) Problems() []string {
	return append(append([]string(nil), tc.Violations...), tc.Mismatches...)
}

// Summary says in one line whether every task's check passed, and what
// failed where one did not.
func Summary(checks []TaskCheck) string {
	var counted uint64
	var acks int
	var bad []string
	for _, t := range checks {
		counted += t.Counted
		acks += t.Acks
		if t.Exact {
			continue
		}
		ps := t.Problems()
		bad = append(bad, fmt.Sprintf("%s: %d problems (%s)", t.Task, len(ps), ps[0]))
	}
	if len(bad) == 0 {
		if acks == 0 {
			return fmt.Sprintf("exact: %d stateful tasks, %d input messages each counted once (no worker's acknowledgements were checked)", len(checks), counted)
		}
		return fmt.Sprintf("exact: %d stateful tasks, %d input messages each counted once, none of %d acknowledged commits lost or acknowledged to a stale owner", len(checks), counted, acks)
	}
	return "NOT EXACT: " + strings.Join(bad, "; ")
}

// CompareCounts compares a counting worker's state (key → decimal count)
// with the exact counts it should hold, and describes every difference:
// a wrong or undecodable count, a missing key, a key that should not be.
func CompareCounts(data map[string][]byte, want map[string]uint64) []string {
	var diffs []string
	keys := make([]string, 0, len(want)+len(data))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range data {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		w, expected := want[k]
		v, present := data[k]
		switch {
		case !present && w == 0:
		case !present:
			diffs = append(diffs, fmt.Sprintf("key %q: missing, want %d", k, w))
		case !expected:
			diffs = append(diffs, fmt.Sprintf("key %q: %q, want no such key", k, v))
		default:
			n, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("key %q: %q is not a decimal count, want %d", k, v, w))
			} else if n != w {
				diffs = append(diffs, fmt.Sprintf("key %q: %d, want %d (off by %+d)", k, n, w, int64(n)-int64(w)))
			}
		}
	}
	return diffs
}

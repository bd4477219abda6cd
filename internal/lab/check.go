package lab

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/countworker"
	"github.com/handoffhq/handoff/internal/invariants"
)

// Drain waits until every stateful task has committed the last input
// message published to it. Stop the input first.
func (l *Lab) Drain(ctx context.Context) error {
	last := l.input.Last()
	for {
		committed, _ := l.rec.Committed()
		var behind []string
		for task, seq := range last {
			if l.rec.stateful[task] && committed[task] < seq {
				behind = append(behind, task)
			}
		}
		if len(behind) == 0 {
			return nil
		}
		if err := l.stuck(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			sort.Strings(behind)
			return fmt.Errorf("lab: %d tasks have not committed all their input (%s): %w", len(behind), strings.Join(behind, " "), ctx.Err())
		case <-l.rec.Sampled():
		}
	}
}

// TaskCheck is what the changelog of one stateful task shows.
type TaskCheck struct {
	Task    string `json:"task"`
	Commits int    `json:"commits"`
	Markers int    `json:"markers"`
	// Violations break the one-writer chain (invariants.CheckChain).
	Violations []string `json:"violations,omitempty"`
	// Missing counts acknowledged commits absent from the changelog.
	Missing int `json:"missing"`
	// Checkpoint is the input sequence the replayed state reaches, Input
	// the last one published; Counted is how many input messages the
	// replayed counts stand for.
	Checkpoint uint64 `json:"checkpoint"`
	Input      uint64 `json:"input"`
	Counted    uint64 `json:"counted"`
	// Mismatches lists keys whose replayed count differs from the input's.
	Mismatches []string `json:"mismatches,omitempty"`
	// HistoryKeys is how many pre-loaded keys the replay holds.
	HistoryKeys int  `json:"historyKeys"`
	Exact       bool `json:"exact"`
}

// CheckResult is the lab's final check.
type CheckResult struct {
	Tasks []TaskCheck `json:"tasks"`
	// Exact holds when every task's replayed counts equal its input's up to
	// the last message published, its chain has no violation, and no
	// acknowledged commit is missing.
	Exact bool `json:"exact"`
	// Counted is the input messages counted over all stateful tasks.
	Counted uint64 `json:"counted"`
	// HistoryKeys is the pre-loaded keys found over all tasks.
	HistoryKeys int `json:"historyKeys"`
}

// Check replays every stateful task's changelog with internal/invariants
// and compares it with what the lab knows: the input it published, the
// commits workers were acknowledged, and the history it pre-loaded
// (historyKeys per task; -1 to skip). Call it after Drain; members may run.
func (l *Lab) Check(ctx context.Context, historyKeys int) (CheckResult, error) {
	acks := map[string][]invariants.Acked{}
	for _, e := range l.rec.WorkerEvents() {
		if e.Kind == client.EventCommit {
			acks[e.Task] = append(acks[e.Task], invariants.Acked{Task: e.Task, Seq: e.Seq, Epoch: e.Epoch})
		}
	}
	last := l.input.Last()
	res := CheckResult{Exact: true}
	for _, t := range l.rec.tasks {
		if !t.Stateful {
			continue
		}
		recs, err := changelog.ReadTask(ctx, l.js, l.opts.Group, t.ID)
		if err != nil {
			return res, fmt.Errorf("lab: check %s: %w", t.ID, err)
		}
		l.rec.setLog(t.ID, recs)
		tc := checkTask(t.ID, recs, acks[t.ID], last[t.ID], l.input, historyKeys)
		res.Exact = res.Exact && tc.Exact
		res.Counted += tc.Counted
		res.HistoryKeys += tc.HistoryKeys
		res.Tasks = append(res.Tasks, tc)
	}
	return res, nil
}

func checkTask(task string, recs []changelog.Record, acks []invariants.Acked, input uint64, g *Generator, historyKeys int) TaskCheck {
	chain := invariants.CheckChain(task, recs)
	tc := TaskCheck{Task: task, Commits: chain.Commits, Markers: chain.Markers, Violations: chain.Violations, Input: input}
	tc.Missing = len(invariants.MissingAcks(recs, acks))
	st := changelog.Replay(recs)
	cp, err := countworker.DecodeCheckpoint(st.Checkpoint)
	if err != nil {
		tc.Mismatches = append(tc.Mismatches, err.Error())
	}
	tc.Checkpoint = cp
	want, n := g.Expected(task, cp)
	tc.Counted = n
	got := 0
	for k, v := range st.Data {
		if strings.HasPrefix(k, HistoryKeyPrefix) {
			tc.HistoryKeys++
			continue
		}
		got++
		if w, ok := want[k]; !ok || strconv.FormatUint(w, 10) != string(v) {
			tc.Mismatches = append(tc.Mismatches, fmt.Sprintf("%s = %s, input has %d", k, v, w))
		}
	}
	if got != len(want) {
		tc.Mismatches = append(tc.Mismatches, fmt.Sprintf("%d keys counted, input has %d", got, len(want)))
	}
	if cp != input {
		tc.Mismatches = append(tc.Mismatches, fmt.Sprintf("counted up to input seq %d, last published %d", cp, input))
	}
	if historyKeys >= 0 && tc.HistoryKeys != historyKeys {
		tc.Mismatches = append(tc.Mismatches, fmt.Sprintf("%d pre-loaded keys, want %d", tc.HistoryKeys, historyKeys))
	}
	sort.Strings(tc.Mismatches)
	tc.Exact = len(tc.Mismatches) == 0 && len(tc.Violations) == 0 && tc.Missing == 0
	return tc
}

// Summary says in one line whether the check passed, or what failed.
func (c CheckResult) Summary() string {
	if c.Exact {
		return fmt.Sprintf("exact: %d stateful tasks, %d input messages each counted once", len(c.Tasks), c.Counted)
	}
	var bad []string
	for _, t := range c.Tasks {
		if t.Exact {
			continue
		}
		var why []string
		if len(t.Violations) > 0 {
			why = append(why, fmt.Sprintf("%d chain violations (%s)", len(t.Violations), t.Violations[0]))
		}
		if t.Missing > 0 {
			why = append(why, fmt.Sprintf("%d acknowledged commits missing", t.Missing))
		}
		if len(t.Mismatches) > 0 {
			why = append(why, fmt.Sprintf("%d mismatches (%s)", len(t.Mismatches), t.Mismatches[0]))
		}
		bad = append(bad, t.Task+": "+strings.Join(why, ", "))
	}
	return "NOT EXACT: " + strings.Join(bad, "; ")
}

// ErrStuck is wrapped by the errors of waits that cannot end because a
// member's agent stopped answering (a deadlock in the agent, say).
var ErrStuck = errors.New("lab: a member's agent is stuck")

// stuck returns an error naming the members whose agents stopped
// answering, if any.
func (l *Lab) stuck() error {
	var ids []string
	for _, m := range l.Members() {
		m.mu.RLock()
		if m.inc != nil && m.inc.stuck.Load() {
			ids = append(ids, m.ID)
		}
		m.mu.RUnlock()
	}
	if len(ids) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s has not answered for %s (see the agents' log)", ErrStuck, strings.Join(ids, ", "), viewWait)
}

// errTimeout is returned by waits that ran out of time.
var errTimeout = errors.New("lab: timed out")

// WaitSteady waits until the group has been steady for hold and cond (nil:
// always) holds on the snapshot, and returns when it became steady.
func (l *Lab) WaitSteady(ctx context.Context, hold time.Duration, cond func(Snapshot) bool) (time.Time, error) {
	for {
		ch := l.rec.Sampled()
		if steady, since := l.rec.Steady(); steady && time.Since(since) >= hold && (cond == nil || cond(l.rec.Snapshot())) {
			return since, nil
		}
		if err := l.stuck(); err != nil {
			return time.Time{}, err
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%w waiting for the group to settle: %w", errTimeout, ctx.Err())
		case <-ch:
		}
	}
}

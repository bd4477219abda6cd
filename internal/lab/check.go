package lab

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/record"
)

// Drain waits until every stateful task has committed the last input
// message published to it. Stop the input first.
func (l *Lab) Drain(ctx context.Context) error {
	last := l.input.Ends()
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

// CheckResult is the lab's final check: record.CheckTask of every stateful
// task.
type CheckResult struct {
	Tasks []record.TaskCheck `json:"tasks"`
	// Exact holds when every task's check did.
	Exact bool `json:"exact"`
	// Counted is the input messages counted over all stateful tasks.
	Counted uint64 `json:"counted"`
	// HistoryKeys is the pre-loaded keys found over all tasks.
	HistoryKeys int `json:"historyKeys"`
}

// Check replays every stateful task's changelog and checks it
// (record.CheckTask) against what the lab knows: the input it published,
// the commits workers were acknowledged, and the history it pre-loaded
// (historyKeys per task; -1 to skip). Call it after Drain; members may run.
func (l *Lab) Check(ctx context.Context, historyKeys int) (CheckResult, error) {
	acks := map[string][]record.Acked{}
	for _, a := range record.Acks(l.rec.WorkerEvents()) {
		acks[a.Task] = append(acks[a.Task], a)
	}
	ends := l.input.Ends()
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
		counts, _ := l.input.Expected(t.ID, ends[t.ID])
		tc := record.CheckTask(t.ID, recs, acks[t.ID], record.Want{Counts: counts, End: ends[t.ID], HistoryKeys: historyKeys})
		res.Exact = res.Exact && tc.Exact
		res.Counted += tc.Counted
		res.HistoryKeys += tc.HistoryKeys
		res.Tasks = append(res.Tasks, tc)
	}
	return res, nil
}

// Summary says in one line whether the check passed, or what failed.
func (c CheckResult) Summary() string { return record.Summary(c.Tasks) }

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

package group

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/handoffhq/handoff/api"
)

// ProgressSubject is where member publishes its learners' and standbys'
// progress (core NATS).
func ProgressSubject(group, member string) string {
	return "handoff." + group + ".progress." + member
}

// ProgressWildcard matches the progress subjects of every member of group.
func ProgressWildcard(group string) string { return "handoff." + group + ".progress.>" }

// Progress is one learner's or standby's report on its member's progress
// subject: what the worker API shows of it, and the generation the member
// had applied when it reported (the leader counts a report only from the
// generation that made the member a learner).
type Progress struct {
	api.LearnerProgress
	Generation uint64
}

// progressJSON is a Progress as it is published: its time is "at" (not the
// API's "updated"), as members of every version read it.
type progressJSON struct {
	api.LearnerProgress
	Updated    *struct{} `json:"updated,omitempty"` // hides the API's name
	At         time.Time `json:"at"`
	Generation uint64    `json:"generation"`
}

// MarshalJSON encodes p as it is published.
func (p Progress) MarshalJSON() ([]byte, error) {
	return json.Marshal(progressJSON{LearnerProgress: p.LearnerProgress, At: p.Updated, Generation: p.Generation})
}

// UnmarshalJSON decodes a published report.
func (p *Progress) UnmarshalJSON(b []byte) error {
	var w progressJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	w.LearnerProgress.Updated = w.At
	*p = Progress{LearnerProgress: w.LearnerProgress, Generation: w.Generation}
	return nil
}

// PublishProgress sends one report of member over core NATS.
func PublishProgress(nc *nats.Conn, group, member string, p Progress) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode progress of %s: %w", p.Task, err)
	}
	if err := nc.Publish(ProgressSubject(group, member), b); err != nil {
		return fmt.Errorf("publish progress of %s: %w", p.Task, err)
	}
	return nil
}

// WatchProgress calls fn with every progress report published in group,
// from a NATS subscription, until the returned stop is called. Learners and
// standbys report at least once a second. fn runs on the subscription's
// goroutine.
func WatchProgress(nc *nats.Conn, group string, fn func(Progress)) (stop func(), err error) {
	sub, err := nc.Subscribe(ProgressWildcard(group), func(m *nats.Msg) {
		var p Progress
		if json.Unmarshal(m.Data, &p) == nil {
			fn(p)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to progress of group %s: %w", group, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// WatchMemberProgress calls fn with every progress report member publishes
// in group, as WatchProgress does for the whole group.
func WatchMemberProgress(nc *nats.Conn, group, member string, fn func(Progress)) (stop func(), err error) {
	sub, err := nc.Subscribe(ProgressSubject(group, member), func(m *nats.Msg) {
		var p Progress
		if json.Unmarshal(m.Data, &p) == nil {
			fn(p)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to progress of %s in group %s: %w", member, group, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// SortProgress orders reports by task, then member.
func SortProgress(ps []api.LearnerProgress) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Task != ps[j].Task {
			return ps[i].Task < ps[j].Task
		}
		return ps[i].Member < ps[j].Member
	})
}

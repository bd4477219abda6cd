package assign

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// t0 is the time of every table test; at(s) is s seconds later.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// config returns the default config with the given task specs, then edits.
func config(stateful, stateless string, edits ...func(*Config)) Config {
	c := DefaultConfig()
	if stateful != "" {
		c.Stateful = []string{stateful}
	}
	if stateless != "" {
		c.Stateless = []string{stateless}
	}
	for _, e := range edits {
		e(&c)
	}
	return c
}

func members(ids ...string) []Member {
	ms := make([]Member, len(ids))
	for i, id := range ids {
		ms[i] = Member{ID: id}
	}
	return ms
}

// placed builds a current assignment from "task=owner" pairs, each at epoch 1.
func placed(gen uint64, pairs ...string) Assignment {
	a := Assignment{Generation: gen, Tasks: map[string]*TaskAssignment{}}
	for _, p := range pairs {
		task, owner, _ := strings.Cut(p, "=")
		a.Tasks[task] = &TaskAssignment{Active: owner, Epoch: 1}
	}
	return a
}

// lags builds Input.Lags from "task/member=lag" triples.
func lags(triples ...string) map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	for _, tr := range triples {
		var task, m string
		var l uint64
		key, val, _ := strings.Cut(tr, "=")
		task, m, _ = strings.Cut(key, "/")
		fmt.Sscan(val, &l)
		setLag(out, task, m, l)
	}
	return out
}

// summary renders one task's placement on one line, e.g.
// "a=m1 e=2 revoke=m2/balance learners=m2 standbys=m3 seq=9".
func summary(t *TaskAssignment) string {
	if t == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "a=%s e=%d", t.Active, t.Epoch)
	if t.Revoke != nil {
		fmt.Fprintf(&b, " revoke=%s/%s", t.Revoke.Target, t.Revoke.Reason)
	}
	if len(t.Learners) > 0 {
		var ls []string
		for _, l := range t.Learners {
			ls = append(ls, l.Member)
		}
		fmt.Fprintf(&b, " learners=%s", strings.Join(ls, ","))
	}
	if len(t.Standbys) > 0 {
		fmt.Fprintf(&b, " standbys=%s", strings.Join(t.Standbys, ","))
	}
	if t.HandoffSeq != 0 {
		fmt.Fprintf(&b, " seq=%d", t.HandoffSeq)
	}
	return b.String()
}

// checkSummaries checks the summary of each task in want (task -> summary).
func checkSummaries(t *testing.T, res Result, want map[string]string) {
	t.Helper()
	for id, w := range want {
		if got := summary(res.Assignment.Tasks[id]); got != w {
			t.Errorf("Plan(in).Tasks[%s] = %s, want %s", id, got, w)
		}
	}
}

// moveLines renders moves as "task kind from>to reason".
func moveLines(ms []Move) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = fmt.Sprintf("%s %s %s>%s %s", m.Task, m.Kind, m.From, m.To, m.Reason)
	}
	return out
}

// counts renders how many tasks each member owns, e.g. "m1:2 m2:2".
func counts(a Assignment, filter func(id string) bool) string {
	c := map[string]int{}
	for id, t := range a.Tasks {
		if filter == nil || filter(id) {
			c[t.Active]++
		}
	}
	var parts []string
	for m, n := range c {
		parts = append(parts, fmt.Sprintf("%s:%d", m, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

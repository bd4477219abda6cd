package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
)

// TestJudgeFinalCommit judges release-revoked on recorded calls: two
// running tasks, revoked at once and released 100 ms later, with their
// commits placed around the revoke. A revoke that reaches the worker
// during a commit, or just after one, may find nothing to commit; a
// worker that makes no final commit on any other revoke fails.
func TestJudgeFinalCommit(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rvAt := t0.Add(time.Second)
	ms := func(d int) time.Time { return rvAt.Add(time.Duration(d) * time.Millisecond) }
	// commit is a commit of task from start to end, in ms from the revoke.
	type commit struct {
		task       string
		start, end int
	}
	tests := []struct {
		name    string
		commits []commit
		fail    string // what the reason says; empty: the case passes
	}{
		{name: "final commits", commits: []commit{{"c-0", -300, -290}, {"c-1", -200, -190}, {"c-0", 10, 20}}},
		{name: "every revoke during a commit", commits: []commit{{"c-0", -50, 30}, {"c-1", -5, 40}}},
		{name: "one during, one just after a commit", commits: []commit{{"c-0", -50, 30}, {"c-1", -15, -5}}},
		{name: "no final commit", commits: []commit{{"c-0", -500, -490}, {"c-1", -300, -290}},
			fail: "none of the 2 revoked tasks got a commit between its revoke and its release:"},
		{name: "no final commit besides one during a commit", commits: []commit{{"c-0", -50, 30}, {"c-1", -300, -290}},
			fail: "none of the 1 revoked tasks got a commit between its revoke and its release (besides 1 whose revoke came during or just after a commit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tasks := []api.TaskView{{ID: "c-0", Role: api.RoleActive, Stateful: true, Epoch: 1}, {ID: "c-1", Role: api.RoleActive, Stateful: true, Epoch: 1}}
			calls := []call{
				{Kind: callAssignment, Start: t0, End: t0, Status: 200, View: &api.View{Version: 1, Tasks: tasks, Revoke: []string{}}},
				{Kind: callAssignment, Start: rvAt, End: rvAt, Status: 200, View: &api.View{Version: 2, Tasks: tasks, Revoke: []string{"c-0", "c-1"}}},
			}
			for _, c := range tt.commits {
				calls = append(calls, call{Kind: callCommit, Task: c.task, Start: ms(c.start), End: ms(c.end), Status: 200})
			}
			for _, task := range []string{"c-0", "c-1"} {
				calls = append(calls, call{Kind: callRelease, Task: task, Start: ms(100), End: ms(101), Status: 200})
			}
			r := &run{o: Options{Job: JobCount, InputEvery: DefaultInputEvery, ReleaseWait: DefaultReleaseWait}, px: &proxy{}, faults: map[string]*call{}}
			v := verdicts{}
			r.judgeRevoked(newHistory(calls), v)
			reason, failed := v[CaseRevokedRunning]
			switch {
			case tt.fail == "" && failed:
				t.Errorf("%s failed: %s", CaseRevokedRunning, reason)
			case tt.fail != "" && !failed:
				t.Errorf("%s passed, want it to fail with %q", CaseRevokedRunning, tt.fail)
			case tt.fail != "" && !strings.Contains(reason, tt.fail):
				t.Errorf("%s failed with %q, want %q in it", CaseRevokedRunning, reason, tt.fail)
			}
		})
	}
}

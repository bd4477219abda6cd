package scenario

import (
	"testing"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/httpapi"
)

func TestSettled(t *testing.T) {
	task := func(id, active string, stateful bool) httpapi.GroupTask {
		return httpapi.GroupTask{ID: id, Active: active, Stateful: stateful}
	}
	members := func(states ...string) []httpapi.MemberView {
		var out []httpapi.MemberView
		for i := 0; i+1 < len(states); i += 2 {
			out = append(out, httpapi.MemberView{ID: states[i], State: states[i+1]})
		}
		return out
	}
	balanced := []httpapi.GroupTask{task("t-0", "a", true), task("t-1", "b", true), task("t-2", "a", true), task("s-0", "b", false)}
	tests := []struct {
		name string
		gv   httpapi.GroupView
		ok   bool
	}{
		{"balanced", httpapi.GroupView{Tasks: balanced, Members: members("a", "member", "b", "member")}, true},
		{"a left member is done", httpapi.GroupView{Tasks: balanced, Members: members("a", "member", "b", "member", "c", "done")}, true},
		{"a dead member", httpapi.GroupView{Tasks: balanced, Members: members("a", "member", "b", "member", "c", "dead")}, true},
		{"an extra live member", httpapi.GroupView{Tasks: balanced, Members: members("a", "member", "b", "member", "c", "member")}, false},
		{"a member missing", httpapi.GroupView{Tasks: balanced, Members: members("a", "member")}, false},
		{"a member still joining", httpapi.GroupView{Tasks: balanced, Members: members("a", "member", "b", "joining")}, false},
		{"unbalanced", httpapi.GroupView{Tasks: []httpapi.GroupTask{task("t-0", "a", true), task("t-1", "a", true), task("t-2", "a", true)},
			Members: members("a", "member", "b", "member")}, false},
		{"a learner in flight", httpapi.GroupView{Tasks: []httpapi.GroupTask{{ID: "t-0", Active: "a", Stateful: true, Learners: []string{"b"}}},
			Members: members("a", "member", "b", "member")}, false},
		{"a revoke pending", httpapi.GroupView{Tasks: []httpapi.GroupTask{{ID: "t-0", Active: "a", Stateful: true, Revoking: "b"}},
			Members: members("a", "member", "b", "member")}, false},
		{"a task on another member", httpapi.GroupView{Tasks: []httpapi.GroupTask{task("t-0", "c", true)},
			Members: members("a", "member", "b", "member")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Settled(tt.gv, "a", "b")
			if (err == nil) != tt.ok {
				t.Errorf("Settled(%s) = %v, want ok=%v", tt.name, err, tt.ok)
			}
		})
	}
}

func TestInFlight(t *testing.T) {
	tests := []struct {
		name string
		ma   group.MemberAssignment
		want string
	}{
		{"nothing moving", group.MemberAssignment{Member: "a", Tasks: map[string]*assign.TaskAssignment{
			"t-0": {Active: "a", Epoch: 1, Standbys: []string{"b"}}}}, ""},
		{"no tasks", group.MemberAssignment{Member: "a", Learning: []string{"t-1"}}, ""},
		{"a revoke and a learner", group.MemberAssignment{Member: "a", Tasks: map[string]*assign.TaskAssignment{
			"t-1": {Active: "a", Epoch: 1, Learners: []assign.Learner{{Member: "c"}}},
			"t-0": {Active: "a", Epoch: 1, Revoke: &assign.Revoke{Target: "b"}},
		}}, "t-0 revoking a→b, t-1 on a learning on [c]"},
	}
	for _, tt := range tests {
		if got := InFlight(tt.ma); got != tt.want {
			t.Errorf("InFlight(%s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

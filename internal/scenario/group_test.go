package scenario

import (
	"testing"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
)

func TestSettled(t *testing.T) {
	task := func(id, active string, stateful bool) api.GroupTask {
		return api.GroupTask{ID: id, Active: active, Stateful: stateful}
	}
	members := func(states ...string) []api.MemberView {
		var out []api.MemberView
		for i := 0; i+1 < len(states); i += 2 {
			out = append(out, api.MemberView{ID: states[i], State: states[i+1]})
		}
		return out
	}
	balanced := []api.GroupTask{task("t-0", "a", true), task("t-1", "b", true), task("t-2", "a", true), task("s-0", "b", false)}
	tests := []struct {
		name string
		gv   api.GroupView
		ok   bool
	}{
		{"balanced", api.GroupView{Tasks: balanced, Members: members("a", "member", "b", "member")}, true},
		{"a left member is done", api.GroupView{Tasks: balanced, Members: members("a", "member", "b", "member", "c", "done")}, true},
		{"a dead member", api.GroupView{Tasks: balanced, Members: members("a", "member", "b", "member", "c", "dead")}, true},
		{"an extra live member", api.GroupView{Tasks: balanced, Members: members("a", "member", "b", "member", "c", "member")}, false},
		{"a member missing", api.GroupView{Tasks: balanced, Members: members("a", "member")}, false},
		{"a member still joining", api.GroupView{Tasks: balanced, Members: members("a", "member", "b", "joining")}, false},
		{"unbalanced", api.GroupView{Tasks: []api.GroupTask{task("t-0", "a", true), task("t-1", "a", true), task("t-2", "a", true)},
			Members: members("a", "member", "b", "member")}, false},
		{"a learner in flight", api.GroupView{Tasks: []api.GroupTask{{ID: "t-0", Active: "a", Stateful: true, Learners: []string{"b"}}},
			Members: members("a", "member", "b", "member")}, false},
		{"a revoke pending", api.GroupView{Tasks: []api.GroupTask{{ID: "t-0", Active: "a", Stateful: true, Revoking: "b"}},
			Members: members("a", "member", "b", "member")}, false},
		{"a task on another member", api.GroupView{Tasks: []api.GroupTask{task("t-0", "c", true)},
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

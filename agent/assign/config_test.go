package assign

import (
	"slices"
	"strings"
	"testing"
)

func TestExpandSpec(t *testing.T) {
	tests := []struct {
		spec    string
		want    []string
		wantErr string
	}{
		{spec: "a", want: []string{"a"}},
		{spec: " a , b_2,", want: []string{"a", "b_2"}},
		{spec: "orders-0..3", want: []string{"orders-0", "orders-1", "orders-2", "orders-3"}},
		{spec: "x9..11,y", want: []string{"x9", "x10", "x11", "y"}},
		{spec: "7..8", want: []string{"7", "8"}},
		{spec: "bad id", wantErr: `task ID "bad id"`},
		{spec: "a..3", wantErr: "write it as prefix-FIRST..LAST"},
		{spec: "a-5..3", wantErr: "write it as prefix-FIRST..LAST"},
		{spec: "a.b-1..2", wantErr: `task ID "a.b-1" from range`},
		{spec: strings.Repeat("p", 127) + "8..10", wantErr: `task ID "` + strings.Repeat("p", 127) + `10" from range`},
		{spec: "a-0..100000", wantErr: "at most 100000"},
	}
	for _, tt := range tests {
		got, err := ExpandSpec(tt.spec)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ExpandSpec(%q) = %v, %v, want error containing %q", tt.spec, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ExpandSpec(%q) = %q, %v, want %q", tt.spec, got, err, tt.want)
		}
	}
}

func TestConfigTasks(t *testing.T) {
	c := Config{Stateful: []string{"s-9..10"}, Stateless: []string{"l,a"}}
	got, err := c.Tasks()
	want := []Task{{"a", false}, {"l", false}, {"s-10", true}, {"s-9", true}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Tasks() = %v, %v, want %v", got, err, want)
	}
	c.Stateless = []string{"s-10"}
	if _, err := c.Tasks(); err == nil || !strings.Contains(err.Error(), `task "s-10" is listed twice`) {
		t.Errorf("Tasks() with a duplicate = %v, want a listed-twice error", err)
	}
}

func TestValidTaskID(t *testing.T) {
	for id, want := range map[string]bool{
		"a": true, "A-z_0": true, strings.Repeat("x", 128): true,
		"": false, strings.Repeat("x", 129): false, "a.b": false, "a b": false, "é": false, "a>": false,
	} {
		if got := ValidTaskID(id); got != want {
			t.Errorf("ValidTaskID(%q) = %v, want %v", id, got, want)
		}
	}
}

// Diff compares the task sets, not how they are written: the same tasks
// in another order or notation agree.
func TestConfigDiffTasks(t *testing.T) {
	stored := Config{Stateful: []string{"a-0..3"}, Stateless: []string{"s-0..1"}}
	for _, c := range []struct {
		name     string
		stateful []string
		differ   bool
	}{
		{"same spec", []string{"a-0..3"}, false},
		{"listed in reverse", []string{"a-3,a-2,a-1,a-0"}, false},
		{"split in two", []string{"a-2..3", "a-0..1"}, false},
		{"a task fewer", []string{"a-0..2"}, true},
		{"a task more", []string{"a-0..4"}, true},
	} {
		proposed := stored
		proposed.Stateful = c.stateful
		if d := stored.Diff(proposed); (len(d) > 0) != c.differ {
			t.Errorf("%s: Diff(%v) = %q, want a difference: %v", c.name, c.stateful, d, c.differ)
		}
	}
}

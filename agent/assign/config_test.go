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

package groupcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/handoffhq/handoff/agent/assign"
)

// runPlanCmd runs "handoff plan args..." with stdin and returns its output.
func runPlanCmd(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := Plan(context.Background(), args, Env{Stdin: strings.NewReader(stdin), Stdout: &out})
	return out.String(), err
}

// hasRow reports whether some line of out has exactly these fields.
func hasRow(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.Join(strings.Fields(line), " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}

func TestPlanScaleUpSample(t *testing.T) {
	out, err := runPlanCmd(t, "", "../../../../testdata/plan/scale-up.json")
	if err != nil {
		t.Fatalf("handoff plan scale-up.json: %v", err)
	}
	for _, row := range [][]string{
		{"Generation", "12", "→", "13", "(planned", "at", "2025-06-01T12:00:00Z)"},
		{"worker-3", "new", "0", "0", "0", "→", "3", "0"},
		{"orders-9", "learner-add", "worker-0", "worker-3", "balance"},
		{"orders-7", "learner-add", "worker-1", "worker-3", "balance"},
		{"orders-8", "learner-add", "worker-2", "worker-3", "balance"},
		{"enrich-3", "revoke", "worker-0", "worker-3", "balance"},
	} {
		if !hasRow(out, row...) {
			t.Errorf("handoff plan scale-up.json printed\n%s\nwant a line %q", out, strings.Join(row, " "))
		}
	}
	if !strings.Contains(out, "Next deadline: 2025-06-01T12:00:10Z") {
		t.Errorf("handoff plan scale-up.json printed\n%s\nwant the next deadline 12:00:10", out)
	}
}

func TestPlanLeaveSample(t *testing.T) {
	out, err := runPlanCmd(t, "", "../../../../testdata/plan/leave.json")
	if err != nil {
		t.Fatalf("handoff plan leave.json: %v", err)
	}
	for _, row := range [][]string{
		{"orders-8", "promote", "worker-2", "worker-0", "released"},
		{"orders-2", "revoke", "worker-2", "worker-0", "leave"},
		{"orders-5", "worker-2", "→", "worker-1", "learning,", "lag", "5400", "(acceptable", "100)"},
		{"worker-2", "leaving", "4", "→", "3", "0", "0", "0"},
	} {
		if !hasRow(out, row...) {
			t.Errorf("handoff plan leave.json printed\n%s\nwant a line %q", out, strings.Join(row, " "))
		}
	}
}

func TestPlanJSON(t *testing.T) {
	data, err := os.ReadFile("../../../../testdata/plan/scale-up.json")
	if err != nil {
		t.Fatal(err)
	}
	out, err := runPlanCmd(t, string(data), "--json", "-")
	if err != nil {
		t.Fatalf("handoff plan --json -: %v", err)
	}
	var res assign.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("handoff plan --json printed %q: %v", out, err)
	}
	if !res.Changed || res.Assignment.Generation != 13 || len(res.Moves) != 4 {
		t.Errorf("handoff plan --json = changed %v, generation %d, %d moves; want true, 13, 4", res.Changed, res.Assignment.Generation, len(res.Moves))
	}
	if got := res.Assignment.Tasks["orders-9"].Learners; len(got) != 1 || got[0].Member != "worker-3" {
		t.Errorf("orders-9 learners = %v, want worker-3", got)
	}
}

// TestPlanStandbyMovesToAFreeZone: a standby in its owner's zone moves,
// warm, to the member of a zone no copy uses; the report shows the move
// under way and what it waits for.
func TestPlanStandbyMovesToAFreeZone(t *testing.T) {
	snap := `{"config": {"stateful": ["orders-0"], "standbys": 1}, "now": "2025-06-01T12:00:00Z",
	  "members": [{"id": "worker-0", "zone": "a"}, {"id": "worker-1", "zone": "a"}, {"id": "worker-2", "zone": "b"}],
	  "current": {"generation": 3, "tasks": {"orders-0": {"active": "worker-0", "epoch": 1, "standbys": ["worker-1"]}}},
	  "lags": {"orders-0": {"worker-1": 0}}}`
	out, err := runPlanCmd(t, snap, "-")
	if err != nil {
		t.Fatalf("handoff plan -: %v", err)
	}
	for _, row := range [][]string{
		{"orders-0", "standby-add", "worker-0", "worker-2", "zones"},
		{"orders-0", "worker-1", "→", "worker-2", "standby", "moving,", "no", "progress", "reported", "yet:", "the", "copy", "on", "worker-1",
			"is", "dropped", "once", "the", "copies", "kept", "have", "caught", "up"},
	} {
		if !hasRow(out, row...) {
			t.Errorf("handoff plan printed\n%s\nwant a line %q", out, strings.Join(row, " "))
		}
	}
}

// TestPlanJSONNoDeadline: with nothing that time alone would change,
// --json leaves nextDeadline out rather than printing the zero time.
func TestPlanJSONNoDeadline(t *testing.T) {
	snap := `{"config": {"stateful": ["orders-0"]}, "now": "2025-06-01T12:00:00Z",
	  "members": [{"id": "worker-0"}],
	  "current": {"generation": 3, "tasks": {"orders-0": {"active": "worker-0", "epoch": 1}}}}`
	out, err := runPlanCmd(t, snap, "--json", "-")
	if err != nil {
		t.Fatalf("handoff plan --json -: %v", err)
	}
	if strings.Contains(out, "nextDeadline") {
		t.Errorf("handoff plan --json printed %s\nwant no nextDeadline", out)
	}
}

func TestPlanNowFlag(t *testing.T) {
	// Without its "now" a snapshot is refused unless --now gives one; with
	// --now 12:00:06 and no release, the revoke of orders-8 (started
	// 11:59:55, release timeout 10s) is promoted by the timeout.
	data, err := os.ReadFile("../../../../testdata/plan/leave.json")
	if err != nil {
		t.Fatal(err)
	}
	var in map[string]any
	if err := json.Unmarshal(data, &in); err != nil {
		t.Fatal(err)
	}
	delete(in, "now")
	members := in["members"].([]any)
	delete(members[2].(map[string]any), "released")
	stripped, _ := json.Marshal(in)
	if _, err := runPlanCmd(t, string(stripped), "-"); err == nil || !strings.Contains(err.Error(), "now: missing") {
		t.Errorf("handoff plan without now = %v, want an error about now", err)
	}
	out, err := runPlanCmd(t, string(stripped), "--now", "2025-06-01T12:00:06Z", "-")
	if err != nil {
		t.Fatalf("handoff plan --now: %v", err)
	}
	if !hasRow(out, "orders-8", "promote", "worker-2", "worker-0", "release-timeout") {
		t.Errorf("handoff plan --now printed\n%s\nwant orders-8 promoted after its release timeout", out)
	}
}

func TestPlanBadInput(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, snapshot string
		args           []string
		want           []string
	}{
		{"syntax", "{\n  \"now\": \"2025-06-01T12:00:00Z\",\n  \"members\": [}\n", nil, []string{"line 3, column 16", "invalid character"}},
		{"unknown field", `{"now": "2025-06-01T12:00:00Z", "memebrs": []}`, nil, []string{`unknown field "memebrs"`, "config, now, members"}},
		{"wrong type", `{"now": "2025-06-01T12:00:00Z", "members": [{"id": "w", "capacity": "2"}]}`, nil, []string{`"members.capacity"`, "want a number"}},
		{"empty", ``, nil, []string{"empty"}},
		{"invalid config", `{"now": "2025-06-01T12:00:00Z", "config": {"handover": "fast"}}`, nil, []string{"not a usable snapshot", "handover mode \"fast\""}},
		{"duplicate member", `{"now": "2025-06-01T12:00:00Z", "members": [{"id": "w"}, {"id": "w"}]}`, nil, []string{`members[1]: id "w" is also members[0]`}},
		{"bad now flag", `{}`, []string{"--now", "tomorrow"}, []string{`--now "tomorrow"`, "RFC 3339"}},
		{"two files", `{}`, []string{"a", "b"}, []string{"one snapshot at a time"}},
		{"missing file", "", []string{filepath.Join(dir, "nope.json")}, []string{"no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if args == nil {
				path := filepath.Join(dir, "snap.json")
				if err := os.WriteFile(path, []byte(tt.snapshot), 0o600); err != nil {
					t.Fatal(err)
				}
				args = []string{path}
			}
			_, err := runPlanCmd(t, tt.snapshot, args...)
			if err == nil {
				t.Fatalf("handoff plan %v = nil error, want %q", args, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("handoff plan %v = %v, want it to mention %q", args, err, w)
				}
			}
		})
	}
}

func TestPlanHelp(t *testing.T) {
	out, err := runPlanCmd(t, "", "--help")
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("handoff plan --help = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"Usage: handoff plan", `"members"`, "docs/plan.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("handoff plan --help printed\n%s\nwant %q", out, want)
		}
	}
}

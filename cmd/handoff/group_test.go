package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/internal/natstest"
)

// TestGroupSetAndShow: 'handoff group set' changes only the settings
// given, as the agent's flags spell them, and 'group show' reads them back.
func TestGroupSetAndShow(t *testing.T) {
	srv := natstest.Start(t)
	ctx := context.Background()
	kv, err := group.OpenBucket(ctx, srv.JetStream(t), "g", 1)
	if err != nil {
		t.Fatal(err)
	}
	start := assign.DefaultConfig()
	start.Stateful = []string{"orders-0"}
	if _, err := group.EnsureConfig(ctx, kv, "g", start, nil); err != nil {
		t.Fatal(err)
	}
	groupCmd := func(args ...string) (string, error) {
		var out bytes.Buffer
		e := &env{stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
		err := run(ctx, append(append([]string{"group"}, args...), "--group", "g", "--nats", srv.URL), e)
		return out.String(), err
	}

	if _, err := groupCmd("set"); err == nil || !strings.Contains(err.Error(), "nothing to set") {
		t.Errorf("group set with no setting = %v, want nothing to set", err)
	}
	out, err := groupCmd("set", "--max-learners", "7")
	if err != nil {
		t.Fatalf("group set --max-learners 7: %v\n%s", err, out)
	}
	if !strings.Contains(out, "group g updated") || !strings.Contains(out, "maxLearners") {
		t.Errorf("group set --max-learners 7 printed %q, want the change to maxLearners", out)
	}
	out, err = groupCmd("show", "--json")
	if err != nil {
		t.Fatalf("group show --json: %v\n%s", err, out)
	}
	var got assign.Config
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("group show --json printed %q: %v", out, err)
	}
	want := start
	want.MaxLearners = 7
	if got.MaxLearners != 7 || strings.Join(got.Stateful, ",") != "orders-0" || got.Handover != want.Handover || got.Standbys != want.Standbys {
		t.Errorf("group show after set = %+v, want %+v", got, want)
	}
	if out, err := groupCmd("set", "--max-learners", "7"); err != nil || out != "no change\n" {
		t.Errorf("group set of the stored value = %q, %v; want no change", out, err)
	}
}

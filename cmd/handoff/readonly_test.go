package main

import (
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// TestReadOnlyCommandsLinkNoRuntime keeps the commands that only read the
// group or talk to an agent's API from importing a member's runtime. They
// share this package with 'handoff agent', so go list cannot tell them
// apart: the check is on the imports of their files. They read the group
// through agent/group, plan through agent/assign, and an agent through
// client. (agent/group links changelog, for the one fence check, and
// changelog the store's types; that is below what this test checks.)
func TestReadOnlyCommandsLinkNoRuntime(t *testing.T) {
	runtime := map[string]bool{
		"github.com/handoffhq/handoff/agent":            true,
		"github.com/handoffhq/handoff/internal/sidecar": true,
		"github.com/handoffhq/handoff/internal/lab":     true,
		"github.com/handoffhq/handoff/restore":          true,
		"github.com/handoffhq/handoff/statestore":       true,
	}
	for _, file := range []string{"status.go", "group.go", "plan.go", "leave.go", "health.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if runtime[path] {
				t.Errorf("%s imports %s; a read-only command must not link a member's runtime", file, path)
			}
		}
	}
}

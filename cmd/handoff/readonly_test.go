package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// runtimePackages are a member's runtime: what 'handoff agent' links and a
// command that only reads or edits the group from outside must not. The
// local store and Pebble are part of it (runtimePrefixes).
var runtimePackages = []string{
	"github.com/handoffhq/handoff/agent",
	"github.com/handoffhq/handoff/restore",
	"github.com/handoffhq/handoff/httpapi",
	"github.com/handoffhq/handoff/internal/sidecar",
	"github.com/handoffhq/handoff/internal/lab",
	"github.com/handoffhq/handoff/internal/natsembed",
	"github.com/handoffhq/handoff/statestore",
	"github.com/handoffhq/handoff/snapshot/local",
}

// runtimePrefixes are module paths of the runtime: any package under one
// counts. Pebble is the store's engine: a command that links it links some
// sixty packages of it for nothing.
var runtimePrefixes = []string{
	"github.com/cockroachdb/pebble",
}

// runtimeDeps lists the runtime packages that pkg links, as go list sees
// them; the packages under a runtime prefix count as one entry, the prefix
// followed by "/...".
func runtimeDeps(t *testing.T, pkg string) []string {
	t.Helper()
	var found []string
	for _, dep := range listDeps(t, pkg) {
		if slices.Contains(runtimePackages, dep) {
			found = append(found, dep)
		}
		for _, p := range runtimePrefixes {
			if dep == p || strings.HasPrefix(dep, p+"/") {
				found = append(found, p+"/...")
			}
		}
	}
	slices.Sort(found)
	return slices.Compact(found)
}

// listDeps lists the packages pkg links, as go list -deps sees them.
func listDeps(t *testing.T, pkg string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to list packages with: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestReadOnlyCommandsLinkNoRuntime keeps 'status', 'group' and 'plan',
// whose logic is in groupcli, from linking a member's runtime, the store and
// Pebble included: they read the group through agent/group (and the
// snapshot bucket through snapshot), and plan through agent/assign.
func TestReadOnlyCommandsLinkNoRuntime(t *testing.T) {
	if found := runtimeDeps(t, "github.com/handoffhq/handoff/cmd/handoff/internal/groupcli"); len(found) > 0 {
		t.Errorf("groupcli links %s; the commands that work on a group from outside must not link a member's runtime", strings.Join(found, ", "))
	}
	// The same check finds the runtime where it is: the binary links it
	// for 'handoff agent'.
	found := runtimeDeps(t, "github.com/handoffhq/handoff/cmd/handoff")
	for _, want := range []string{"github.com/handoffhq/handoff/agent", "github.com/cockroachdb/pebble/..."} {
		if !slices.Contains(found, want) {
			t.Errorf("go list -deps cmd/handoff found runtime packages %v, want %s among them: the check sees nothing", found, want)
		}
	}
}

// TestAPICommandsImportNoRuntime keeps 'leave' and 'health', which talk to
// an agent's API and share package main with 'handoff agent', from
// importing a member's runtime; go list cannot tell them apart from it, so
// the check is on the imports of their files. leave reads the API through
// client and its documents (api's types).
func TestAPICommandsImportNoRuntime(t *testing.T) {
	forbidden := map[string]bool{
		"github.com/handoffhq/handoff/agent":            true,
		"github.com/handoffhq/handoff/internal/sidecar": true,
		"github.com/handoffhq/handoff/internal/lab":     true,
		"github.com/handoffhq/handoff/restore":          true,
		"github.com/handoffhq/handoff/statestore":       true,
	}
	for _, file := range []string{"leave.go", "health.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if forbidden[path] {
				t.Errorf("%s imports %s; a command that only talks to an agent's API must not link a member's runtime", file, path)
			}
		}
	}
}

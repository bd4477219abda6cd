package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/handoffhq/handoff/internal/doctest"
)

var update = flag.Bool("update", false, "rewrite handoff-lab's generated part of docs/flags.md from the code")

// TestDocsFlags keeps handoff-lab's part of docs/flags.md in step with its
// commands: each command's --help as it prints it.
func TestDocsFlags(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("## handoff-lab\n\nAs `handoff-lab <command> --help` prints them.\n\n")
	b.WriteString("```text\n$ handoff-lab --help\n" + helpOutput(t) + "```\n\n")
	for _, n := range names {
		fmt.Fprintf(&b, "### handoff-lab %s\n\n```text\n%s```\n\n", n, helpOutput(t, n))
	}
	doctest.CheckGenerated(t, filepath.Join("..", "..", "docs", "flags.md"), doctest.Begin("./cmd/handoff-lab"), b.String(), *update)
}

// helpOutput is what 'handoff-lab args... --help' prints. The context is
// cancelled up front: a command that ignored --help would stop at once
// rather than run.
func helpOutput(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	e := env{stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
	if err := run(ctx, append(args, "--help"), e); err != nil && !errors.Is(err, flag.ErrHelp) {
		t.Errorf("handoff-lab %s --help: %v", strings.Join(args, " "), err)
	}
	return strings.TrimRight(out.String(), "\n") + "\n"
}

package main

import (
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestArchitecturePackages keeps docs/ARCHITECTURE.md's table of packages
// in step with the tree: every directory of the module that holds a Go
// package has a row, and every row names a package that exists.
func TestArchitecturePackages(t *testing.T) {
	page := readDoc(t, "ARCHITECTURE.md")
	start := strings.Index(page, "| package | one job |")
	if start < 0 {
		t.Fatal("docs/ARCHITECTURE.md has no table of packages (| package | one job |)")
	}
	table := page[start:]
	if end := strings.Index(table, "\n\n"); end >= 0 {
		table = table[:end]
	}
	named := map[string]bool{}
	name := regexp.MustCompile("`([^`]+)`")
	for _, row := range strings.Split(table, "\n")[2:] {
		cells := strings.Split(row, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			named[m[1]] = true
		}
	}

	root := filepath.Join("..", "..")
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			if rel = filepath.ToSlash(rel); !slices.Contains(dirs, rel) {
				dirs = append(dirs, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		if !named[dir] {
			t.Errorf("package %s has no row in docs/ARCHITECTURE.md's table of packages", dir)
		}
	}
	for pkg := range named {
		if !slices.Contains(dirs, pkg) {
			t.Errorf("docs/ARCHITECTURE.md's table of packages names %s, which is no package of the tree", pkg)
		}
	}
}

// labPackages are the lab's: the in-process and multi-process harnesses
// (internal/proc runs 'go build'), the record of a run and the counter
// worker. The sidecar's binary, and its image, link none of them:
// 'handoff conformance' runs its members on internal/sidecar, as 'handoff
// agent' does, and its workers are the command under test.
var labPackages = []string{
	"github.com/handoffhq/handoff/internal/lab",
	"github.com/handoffhq/handoff/internal/proc",
	"github.com/handoffhq/handoff/internal/cluster",
	"github.com/handoffhq/handoff/internal/record",
	"github.com/handoffhq/handoff/internal/scenario",
	"github.com/handoffhq/handoff/countworker",
}

// TestSidecarLinksNoLab keeps the lab out of cmd/handoff, and checks that
// the same listing finds it in cmd/handoff-lab, so that the check sees
// what it looks for.
func TestSidecarLinksNoLab(t *testing.T) {
	sidecar := listDeps(t, "github.com/handoffhq/handoff/cmd/handoff")
	for _, p := range labPackages {
		if slices.Contains(sidecar, p) {
			t.Errorf("cmd/handoff links %s: the sidecar's binary must link none of the lab", p)
		}
	}
	if lab := listDeps(t, "github.com/handoffhq/handoff/cmd/handoff-lab"); !slices.Contains(lab, "github.com/handoffhq/handoff/internal/lab") {
		t.Errorf("go list -deps cmd/handoff-lab does not list internal/lab: the check sees nothing")
	}
}

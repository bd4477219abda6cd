// Package doctest is a test helper: it keeps a generated part of a docs
// page in step with the code. The part lies between a begin line that
// names the command regenerating it and the end line after it; the prose
// around it is written by hand. It serves the docs tests of both binaries
// (cmd/handoff and cmd/handoff-lab), each with its own part of a page.
package doctest

import (
	"os"
	"strings"
	"testing"
)

// End closes every generated part.
const End = "<!-- END GENERATED -->"

// Begin is the line that opens a generated part that the command
// 'go test PKG -run TestDocs -update' regenerates.
func Begin(pkg string) string {
	return "<!-- BEGIN GENERATED: go test " + pkg + " -run TestDocs -update -->"
}

// CheckGenerated compares the generated part of the page at path that
// begin opens with want, or rewrites it with want when update is set.
func CheckGenerated(t *testing.T, path, begin, want string, update bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	i := strings.Index(page, begin)
	j := -1
	if i >= 0 {
		if k := strings.Index(page[i:], End); k >= 0 {
			j = i + k
		}
	}
	if i < 0 || j < 0 {
		t.Fatalf("%s has no %q ... %q section", path, begin, End)
	}
	head, got, tail := page[:i+len(begin)], page[i+len(begin):j], page[j:]
	want = "\n" + want
	if got == want {
		return
	}
	if update {
		if err := os.WriteFile(path, []byte(head+want+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", path)
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	n := 0
	for n < len(gl) && n < len(wl) && gl[n] == wl[n] {
		n++
	}
	line := func(ls []string) string {
		if n < len(ls) {
			return ls[n]
		}
		return "(end)"
	}
	t.Errorf("%s is out of date with the code; regenerate it with\n\t%s\n"+
		"first difference, line %d of the generated part:\n\tpage: %s\n\tcode: %s",
		path, strings.TrimSuffix(strings.TrimPrefix(begin, "<!-- BEGIN GENERATED: "), " -->"), n, line(gl), line(wl))
}

package assign

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestReasonsDocumented: the package doc's list of move reasons is the
// vocabulary of reasons.go, no more and no less.
func TestReasonsDocumented(t *testing.T) {
	fset := token.NewFileSet()
	code, err := parser.ParseFile(fset, "reasons.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]bool{}
	ast.Inspect(code, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			v, _ := strconv.Unquote(lit.Value)
			consts[v] = true
		}
		return true
	})
	doc, err := parser.ParseFile(fset, "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(doc.Doc.Text(), "# Move reasons")
	if !ok {
		t.Fatal("the package doc has no section # Move reasons")
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		// A reason's line: a tab, then the word; its continuations are
		// indented further.
		if f := strings.Fields(line); strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "\t ") && len(f) > 1 {
			documented[f[0]] = true
		}
	}
	if len(consts) < 20 || len(documented) < 20 {
		t.Fatalf("%d reasons in reasons.go and %d in the doc: is the parse still right?", len(consts), len(documented))
	}
	for _, r := range slices.Sorted(maps.Keys(consts)) {
		if !documented[r] {
			t.Errorf("reason %q (reasons.go) is not in the package doc's list", r)
		}
	}
	for _, r := range slices.Sorted(maps.Keys(documented)) {
		if !consts[r] {
			t.Errorf("the package doc lists reason %q, which reasons.go does not have", r)
		}
	}
}

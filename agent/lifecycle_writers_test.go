package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// lifecycleFields are the fields of a task's runtime that only Agent.apply
// (lifecycle.go) writes.
var lifecycleFields = []string{"phase", "epoch", "revoke", "release", "takeover", "forWorker", "job", "cache"}

// TestOnlyApplyWritesTaskState parses and type-checks the agent package
// (without its tests) and fails on every assignment to one of
// lifecycleFields of a task, or composite literal of a task that sets one,
// outside lifecycle.go: a task's state has one writer.
func TestOnlyApplyWritesTaskState(t *testing.T) {
	for _, w := range taskStateWrites(t, ".") {
		if filepath.Base(w.pos.Filename) != "lifecycle.go" {
			t.Errorf("%s: %s writes task.%s; only Agent.apply (lifecycle.go) may: add an event (or a field of change) for it", w.pos, w.how, w.field)
		}
	}
}

// stateWrite is a write of one of lifecycleFields.
type stateWrite struct {
	pos   token.Position
	field string
	how   string // "an assignment", "a composite literal", ...
}

// taskStateWrites returns the writes of lifecycleFields of the type task
// in the non-test Go files of the package in dir. It type-checks the
// package on its own: its imports are left unresolved (every use of them
// is an error the check ignores), which leaves the package's own types,
// task among them, resolved.
func taskStateWrites(t *testing.T, dir string) []stateWrite {
	t.Helper()
	fset, files := parseDir(t, dir)
	name := files[0].Name.Name
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: emptyImporter{}, Error: func(error) {}}
	pkg, _ := conf.Check(name, fset, files, info) // errors: the unresolved imports
	obj := pkg.Scope().Lookup("task")
	if obj == nil {
		t.Fatalf("no type task in %s", dir)
	}
	taskType := obj.Type()
	isTask := func(typ types.Type) bool {
		if p, ok := typ.(*types.Pointer); ok {
			typ = p.Elem()
		}
		return types.Identical(typ, taskType)
	}
	// typeOf is x's type, also where the checker gave up on the
	// expression around x (an unresolved import in it).
	typeOf := func(x ast.Expr) types.Type {
		if tv, ok := info.Types[x]; ok {
			return tv.Type
		}
		if id, ok := x.(*ast.Ident); ok {
			if obj := info.Uses[id]; obj != nil {
				return obj.Type()
			}
		}
		return nil
	}
	// field reports the guarded field that x selects of a task, if it does.
	field := func(x ast.Expr) (string, bool) {
		sel, ok := ast.Unparen(x).(*ast.SelectorExpr)
		if !ok || !slices.Contains(lifecycleFields, sel.Sel.Name) {
			return "", false
		}
		if typ := typeOf(ast.Unparen(sel.X)); typ == nil || !isTask(typ) {
			return "", false
		}
		return sel.Sel.Name, true
	}
	var out []stateWrite
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for _, lhs := range n.Lhs {
					if fld, ok := field(lhs); ok {
						out = append(out, stateWrite{fset.Position(lhs.Pos()), fld, "an assignment"})
					}
				}
			case *ast.IncDecStmt:
				if fld, ok := field(n.X); ok {
					out = append(out, stateWrite{fset.Position(n.Pos()), fld, "an increment"})
				}
			case *ast.UnaryExpr:
				if fld, ok := field(n.X); ok && n.Op == token.AND {
					out = append(out, stateWrite{fset.Position(n.Pos()), fld, "taking the address"})
				}
			case *ast.CompositeLit:
				if tv, ok := info.Types[n]; ok && isTask(tv.Type) {
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							if id, ok := kv.Key.(*ast.Ident); ok && slices.Contains(lifecycleFields, id.Name) {
								out = append(out, stateWrite{fset.Position(kv.Pos()), id.Name, "a composite literal"})
							}
						}
					}
				}
			}
			return true
		})
	}
	return out
}

// TestTaskStateWritesFound: the check above finds the writes apply makes,
// so that a write elsewhere would be found too.
func TestTaskStateWritesFound(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range taskStateWrites(t, ".") {
		seen[w.field] = true
	}
	for _, f := range lifecycleFields {
		if !seen[f] {
			t.Errorf("no write of task.%s found, not even in lifecycle.go: the check cannot see writes of it", f)
		}
	}
}

// parseDir parses the non-test Go files in dir.
func parseDir(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return fset, files
}

// emptyImporter resolves every import to an empty package: the check
// needs only the package's own types.
type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	if path == "unsafe" {
		return types.Unsafe, nil
	}
	p := types.NewPackage(path, filepath.Base(path))
	p.MarkComplete()
	return p, nil
}

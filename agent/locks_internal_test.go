package agent

import (
	"go/ast"
	"slices"
	"testing"
)

// commitLockers are the functions that may take a task's commit lock
// themselves: the helper that takes the locks in their order, and the
// commit, which takes its task's commit lock alone (it holds no other
// lock while it waits for it).
var commitLockers = []string{"Agent.lockTasks", "taskLocks.unlock", "Agent.Commit"}

// TestCommitLockTakenByLockTasks: the lock order (docs/ARCHITECTURE.md,
// "Locks") is written out in one place. A task's commit lock, the first
// of the order, is taken only by lockTasks (with a.mu and the task's mu
// after it) or by a commit on its own; every other site goes through
// lockTasks.
func TestCommitLockTakenByLockTasks(t *testing.T) {
	sites := commitLockSites(t, ".")
	if !slices.ContainsFunc(sites, func(s lockSite) bool { return s.fn == "Agent.lockTasks" }) {
		t.Fatalf("no commit lock found taken in Agent.lockTasks (%v): is the parse still right?", sites)
	}
	for _, s := range sites {
		if !slices.Contains(commitLockers, s.fn) {
			t.Errorf("%s: %s takes a task's commitMu itself; take the task's locks with lockTasks, which keeps their order", s.pos, s.fn)
		}
	}
}

// lockSite is a call of commitMu.Lock or commitMu.Unlock.
type lockSite struct {
	fn  string // the function it is in, as Type.method
	pos string
}

// commitLockSites returns the calls x.commitMu.Lock() and
// x.commitMu.Unlock() in the non-test files of the package in dir.
func commitLockSites(t *testing.T, dir string) []lockSite {
	t.Helper()
	fset, files := parseDir(t, dir)
	var out []lockSite
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			fn := fd.Name.Name
			if fd.Recv != nil {
				fn = recvType(fd.Recv.List[0].Type) + "." + fn
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Lock" && sel.Sel.Name != "Unlock") {
					return true
				}
				if mu, ok := sel.X.(*ast.SelectorExpr); ok && mu.Sel.Name == "commitMu" {
					out = append(out, lockSite{fn: fn, pos: fset.Position(call.Pos()).String()})
				}
				return true
			})
		}
	}
	return out
}

package agent

import (
	"go/ast"
	"go/constant"
	"go/types"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestGoroutineMap checks the table of goroutines in docs/ARCHITECTURE.md
// ("Goroutines") against the code: the task events each row says its
// functions may emit are those the functions can reach in the package's
// call graph, no more and no fewer; every loop Agent.Run starts has a row;
// and every function that emits an event is run by some row, so that the
// table names every goroutine that changes a task's state.
func TestGoroutineMap(t *testing.T) {
	rows := goroutineRows(t, readArchitecture(t))
	if len(rows) < 8 {
		t.Fatalf("found %d rows in the goroutine map, want at least one for each of Run's loops", len(rows))
	}
	g := eventGraph(t, ".")
	covered := map[string]bool{}
	for _, r := range rows {
		got := map[string]bool{}
		for _, fn := range r.runs {
			if _, ok := g.calls[fn]; !ok {
				t.Errorf("the goroutine map's row %q runs %s, which the agent package does not declare", r.name, fn)
				continue
			}
			for f := range g.reach(fn) {
				covered[f] = true
				for ev := range g.emits[f] {
					got[ev] = true
				}
			}
		}
		for _, ev := range slices.Sorted(maps.Keys(got)) {
			if !r.emits[ev] {
				t.Errorf("the goroutine map's row %q says it emits %v, but %s can emit %q", r.name, slices.Sorted(maps.Keys(r.emits)), strings.Join(r.runs, ", "), ev)
			}
		}
		for _, ev := range slices.Sorted(maps.Keys(r.emits)) {
			if !got[ev] {
				t.Errorf("the goroutine map's row %q says it emits %q, but nothing %s reaches does", r.name, ev, strings.Join(r.runs, ", "))
			}
		}
	}
	for _, f := range slices.Sorted(maps.Keys(g.emits)) {
		if !covered[f] {
			t.Errorf("%s emits %v, but no row of the goroutine map runs it", f, slices.Sorted(maps.Keys(g.emits[f])))
		}
	}
	for _, loop := range g.runLoops {
		if !slices.ContainsFunc(rows, func(r goroutineRow) bool { return slices.Contains(r.runs, loop) }) {
			t.Errorf("Agent.Run starts %s, which has no row in the goroutine map", loop)
		}
	}
	if len(g.runLoops) < 7 {
		t.Errorf("found %d loops that Agent.Run starts (%v), want at least 7: is the parse still right?", len(g.runLoops), g.runLoops)
	}
}

// TestEventGraph: the call graph sees events through calls, method values
// and closures, stops at apply, and leaves out what a job started by apply
// emits.
func TestEventGraph(t *testing.T) {
	g := eventGraph(t, ".")
	for _, c := range []struct {
		fn   string
		want []string
	}{
		{"Agent.markLost", []string{"lose"}},
		{"Agent.runHandoffs", []string{"take over"}}, // a method value passed to a subscription
		{"Agent.tail", []string{"take over"}},
		{"Agent.runMember", []string{"activate", "cancel revoke", "drop", "keep", "learn", "stand by"}}, // no job's events
	} {
		got := map[string]bool{}
		for f := range g.reach(c.fn) {
			for ev := range g.emits[f] {
				got[ev] = true
			}
		}
		if s := slices.Sorted(maps.Keys(got)); !slices.Equal(s, c.want) {
			t.Errorf("%s reaches events %v, want %v", c.fn, s, c.want)
		}
	}
	rows := goroutineRows(t, "### Goroutines\n\n| goroutine | runs | emits |\n|---|---|---|\n| a | `agent.Agent.tail`, `agent.queries.serve` | take over, lose |\n| b | `agent.Agent.runHeartbeat` | none |\n\n")
	if len(rows) != 2 || !slices.Equal(rows[0].runs, []string{"Agent.tail", "queries.serve"}) || !rows[0].emits["lose"] || len(rows[1].emits) != 0 {
		t.Errorf("goroutineRows = %+v", rows)
	}
}

// goroutineRow is a row of the goroutine map: the functions a goroutine
// runs, as the package names them (Agent.tail), and the events it says
// they may emit.
type goroutineRow struct {
	name  string
	runs  []string
	emits map[string]bool
}

var spanName = regexp.MustCompile("`agent\\.([A-Za-z_]\\w*(?:\\.[A-Za-z_]\\w*)?)`")

// goroutineRows returns the rows of the first table after the heading
// "### Goroutines" in doc whose header is "| goroutine | runs | emits |".
func goroutineRows(t *testing.T, doc string) []goroutineRow {
	t.Helper()
	_, sec, ok := strings.Cut(doc, "### Goroutines")
	if !ok {
		t.Fatal("no section \"Goroutines\"")
	}
	lines := strings.Split(sec, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| goroutine | runs | emits |") })
	if i < 0 {
		t.Fatal("no goroutine map (| goroutine | runs | emits |) in the section \"Goroutines\"")
	}
	var rows []goroutineRow
	for _, l := range lines[i+2:] {
		cells := strings.Split(l, "|")
		if !strings.HasPrefix(l, "|") || len(cells) != 5 {
			break
		}
		r := goroutineRow{name: strings.TrimSpace(cells[1]), emits: map[string]bool{}}
		for _, m := range spanName.FindAllStringSubmatch(cells[2], -1) {
			r.runs = append(r.runs, m[1])
		}
		if evs := strings.TrimSpace(cells[3]); evs != "none" {
			for _, ev := range strings.Split(evs, ",") {
				r.emits[strings.TrimSpace(ev)] = true
			}
		}
		if len(r.runs) == 0 {
			t.Errorf("the goroutine map's row %q names no function of the agent package", r.name)
		}
		rows = append(rows, r)
	}
	return rows
}

// events is a package's call graph as far as task events go.
type events struct {
	// calls maps each function, named as Type.method or func, to the
	// functions of the package it calls or passes on (method values), in
	// its body and its closures.
	calls map[string]map[string]bool
	// emits maps each function to the events it names (change{ev: ...}).
	emits map[string]map[string]bool
	// runLoops are the methods Agent.Run starts in its errgroup.
	runLoops []string
}

// reach returns fn and every function it reaches, not going into
// Agent.apply: every event goes through it, and the jobs it starts are
// goroutines of their own.
func (g events) reach(fn string) map[string]bool {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(f string) {
		if seen[f] {
			return
		}
		seen[f] = true
		for c := range g.calls[f] {
			if c != "Agent.apply" {
				walk(c)
			}
		}
	}
	walk(fn)
	return seen
}

// eventGraph type-checks the non-test files of the package in dir on their
// own (see taskStateWrites) and returns its call graph and the task events
// each function names. Agent.apply names every event and is left out.
func eventGraph(t *testing.T, dir string) events {
	t.Helper()
	fset, files := parseDir(t, dir)
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: emptyImporter{}, Error: func(error) {}}
	pkg, _ := conf.Check(files[0].Name.Name, fset, files, info)
	evType := pkg.Scope().Lookup("taskEvent")
	if evType == nil {
		t.Fatal("no type taskEvent")
	}
	g := events{calls: map[string]map[string]bool{}, emits: map[string]map[string]bool{}}
	name := func(fd *ast.FuncDecl) string {
		if fd.Recv == nil {
			return fd.Name.Name
		}
		return recvType(fd.Recv.List[0].Type) + "." + fd.Name.Name
	}
	// declared maps each function object of the package to its name.
	declared := map[types.Object]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				if obj := info.Defs[fd.Name]; obj != nil {
					declared[obj] = name(fd)
				}
			}
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			fn := name(fd)
			calls, emits := map[string]bool{}, map[string]bool{}
			g.calls[fn] = calls
			if fn == "Agent.apply" {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				id, ok := n.(*ast.Ident)
				if !ok {
					return true
				}
				switch obj := info.Uses[id].(type) {
				case *types.Func:
					if callee, ok := declared[obj.Origin()]; ok {
						calls[callee] = true
					}
				case *types.Const:
					if types.Identical(obj.Type(), evType.Type()) {
						if v, ok := constant.Uint64Val(obj.Val()); ok && v < uint64(numEvents) {
							emits[taskEvent(v).String()] = true
						}
					}
				}
				return true
			})
			if len(emits) > 0 {
				g.emits[fn] = emits
			}
			if fn == "Agent.Run" {
				g.runLoops = goLoops(fd, info, declared)
			}
		}
	}
	return g
}

// goLoops returns the functions of the package that the closures passed to
// an errgroup's Go in fd call: the loops Agent.Run starts.
func goLoops(fd *ast.FuncDecl, info *types.Info, declared map[types.Object]string) []string {
	var out []string
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Go" || len(call.Args) != 1 {
			return true
		}
		lit, ok := call.Args[0].(*ast.FuncLit)
		if !ok {
			return true
		}
		ast.Inspect(lit.Body, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if obj, ok := info.Uses[id].(*types.Func); ok {
					if callee, ok := declared[obj.Origin()]; ok {
						out = append(out, callee)
					}
				}
			}
			return true
		})
		return false
	})
	return out
}

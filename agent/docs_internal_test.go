package agent

import (
	"go/ast"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// architecture is the page that names the code.
const architecture = "../docs/ARCHITECTURE.md"

// docPackages maps the package names docs/ARCHITECTURE.md qualifies code
// with to their directories, relative to this one.
var docPackages = map[string]string{
	"agent":      ".",
	"assign":     "assign",
	"group":      "group",
	"restore":    "../restore",
	"changelog":  "../changelog",
	"statestore": "../statestore",
	"snapshot":   "../snapshot",
	"httpapi":    "../httpapi",
	"api":        "../api",
	"sidecar":    "../internal/sidecar",
	"fence":      "../internal/fence",
	"record":     "../internal/record",
	"cluster":    "../internal/cluster",
}

// TestArchitectureNamesExist: every name docs/ARCHITECTURE.md gives as
// pkg.Name or pkg.Type.Member, in code spans and in its diagrams, is
// declared in that package: a function, type, variable or constant, or a
// method or field of the type.
func TestArchitectureNamesExist(t *testing.T) {
	names := docNames(t, readArchitecture(t))
	if len(names) < 50 {
		t.Fatalf("found %d qualified names in %s, want the protocols' (at least 50): is the pattern still right?", len(names), architecture)
	}
	decls := map[string]map[string]bool{}
	for _, n := range names {
		pkg, rest, _ := strings.Cut(n, ".")
		if decls[pkg] == nil {
			decls[pkg] = declaredNames(t, docPackages[pkg])
		}
		if !decls[pkg][rest] {
			t.Errorf("%s names %s, but package %s (%s) declares no %s", architecture, n, pkg, docPackages[pkg], rest)
		}
	}
	own := declaredNames(t, ".")
	for _, n := range localNames(readArchitecture(t), own) {
		if !own[n] {
			t.Errorf("%s names %s, a member of the agent package's type, which declares no %s", architecture, n, n)
		}
	}
}

// localField is a code span that names a member of a type unqualified, as
// the page's table of locks does (task.mu, Agent.conf).
var localField = regexp.MustCompile(`^([A-Za-z]\w*)\.([A-Za-z_]\w*)$`)

// localNames returns the code spans of doc that name a member of one of
// the types decls declares, unqualified (Type.member); file names
// (leader.go) are not such names.
func localNames(doc string, decls map[string]bool) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(doc, -1) {
		f := localField.FindStringSubmatch(m[1])
		if f == nil || !decls[f[1]] || slices.Contains([]string{"go", "md"}, f[2]) {
			continue
		}
		if _, ok := docPackages[f[1]]; !ok {
			out = append(out, m[1])
		}
	}
	return out
}

// TestArchitectureNamesMissing: the check above fails on a name that does
// not exist.
func TestArchitectureNamesMissing(t *testing.T) {
	names := docNames(t, "see `agent.Agent.noSuchStep` and\n```mermaid\nsequenceDiagram\n  A->>B: restore.Replayer.Run\n```\n")
	if !slices.Equal(names, []string{"agent.Agent.noSuchStep", "restore.Replayer.Run"}) {
		t.Fatalf("docNames = %v", names)
	}
	if got := localNames("`task.noSuchLock` guards `leader.go`; `Agent.mu`, `agent.Agent.apply`", declaredNames(t, ".")); !slices.Equal(got, []string{"task.noSuchLock", "Agent.mu"}) {
		t.Fatalf("localNames = %v", got)
	}
	if declaredNames(t, ".")["Agent.noSuchStep"] {
		t.Fatal("a name that does not exist was found declared")
	}
	if !declaredNames(t, ".")["Agent.apply"] || !declaredNames(t, ".")["task.phase"] || !declaredNames(t, "../restore")["Replayer.Run"] {
		t.Fatal("names that exist were not found declared")
	}
}

func readArchitecture(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(architecture)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	codeSpan  = regexp.MustCompile("`([^`\n]+)`")
	qualified = regexp.MustCompile(`^([a-z]+)\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)$`)
	inDiagram = regexp.MustCompile(`\b([a-z]+)\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)\b`)
)

// docNames returns the names doc qualifies with one of docPackages: code
// spans that are such a name, and such names anywhere in a mermaid block.
func docNames(t *testing.T, doc string) []string {
	t.Helper()
	var out []string
	add := func(pkg, rest string) {
		if _, ok := docPackages[pkg]; ok {
			out = append(out, pkg+"."+rest)
		}
	}
	inMermaid := false
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "```mermaid"):
			inMermaid = true
			continue
		case inMermaid && strings.HasPrefix(strings.TrimSpace(line), "```"):
			inMermaid = false
			continue
		case inMermaid:
			for _, m := range inDiagram.FindAllStringSubmatch(line, -1) {
				add(m[1], m[2])
			}
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			if q := qualified.FindStringSubmatch(m[1]); q != nil {
				add(q[1], q[2])
			}
		}
	}
	return out
}

// declaredNames returns the names the non-test Go files in dir declare at
// the top level, and Type.Member for the methods and struct fields of its
// types.
func declaredNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	_, files := parseDir(t, dir)
	out := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					out[d.Name.Name] = true
					continue
				}
				out[recvType(d.Recv.List[0].Type)+"."+d.Name.Name] = true
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						out[s.Name.Name] = true
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, f := range st.Fields.List {
								for _, n := range f.Names {
									out[s.Name.Name+"."+n.Name] = true
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							out[n.Name] = true
						}
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no declarations in %s", dir)
	}
	return out
}

// recvType is the name of a method's receiver type.
func recvType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// TestLifecycleDiagram checks the task lifecycle's diagram in
// docs/ARCHITECTURE.md against the transition table, both ways: every edge
// drawn is a transition, and every transition is drawn ("any" stands for
// an event that may happen in every phase); and the table of the events
// that leave the phase as it is lists each of them with the phases it may
// happen in.
func TestLifecycleDiagram(t *testing.T) {
	doc := readArchitecture(t)
	drawn, inPlace := lifecycleDoc(t, doc)

	want := map[string]bool{}
	wantInPlace := map[string]string{}
	for e := taskEvent(0); e < numEvents; e++ {
		tr := transitions[e]
		if tr.to == phaseSame {
			from := "any"
			if tr.from != nil {
				var names []string
				for _, p := range tr.from {
					names = append(names, p.String())
				}
				from = strings.Join(names, ", ")
			}
			wantInPlace[e.String()] = from
			continue
		}
		if tr.from == nil {
			want["any --"+e.String()+"--> "+tr.to.String()] = true
			continue
		}
		for _, p := range tr.from {
			want[p.String()+" --"+e.String()+"--> "+tr.to.String()] = true
		}
	}
	for edge := range drawn {
		if !want[edge] {
			t.Errorf("the lifecycle diagram draws %s, which the transition table (lifecycle.go) does not have", edge)
		}
	}
	for edge := range want {
		if !drawn[edge] {
			t.Errorf("the transition table has %s, which the lifecycle diagram does not draw", edge)
		}
	}
	for ev, from := range wantInPlace {
		if got, ok := inPlace[ev]; !ok || got != from {
			t.Errorf("the table of events that leave the phase lists %q in %q (listed %v), want in %q", ev, got, ok, from)
		}
	}
	for ev := range inPlace {
		if _, ok := wantInPlace[ev]; !ok {
			t.Errorf("the table of events that leave the phase lists %q, which is not such an event", ev)
		}
	}
}

// TestLifecycleDiagramParsed: the diagram's parser sees edges, several
// events on one edge, and the in-place table, so that a missing or extra
// edge would be seen.
func TestLifecycleDiagramParsed(t *testing.T) {
	doc := "### The task lifecycle\n```mermaid\nstateDiagram-v2\n    any --> learner: learn\n    activating --> active: ready, take over\n```\n" +
		"| event | in | does |\n|---|---|---|\n| keep | activating, active | x |\n\n| phase | worker sees |\n"
	drawn, inPlace := lifecycleDoc(t, doc)
	want := map[string]bool{"any --learn--> learner": true, "activating --ready--> active": true, "activating --take over--> active": true}
	if len(drawn) != len(want) {
		t.Fatalf("edges %v, want %v", drawn, want)
	}
	for e := range want {
		if !drawn[e] {
			t.Fatalf("edges %v, want %v", drawn, want)
		}
	}
	if len(inPlace) != 1 || inPlace["keep"] != "activating, active" {
		t.Fatalf("in-place events %v", inPlace)
	}
}

var (
	stateEdge  = regexp.MustCompile(`^\s*(\w+)\s*-->\s*(\w+)\s*:\s*(.+?)\s*$`)
	inPlaceRow = regexp.MustCompile(`^\|\s*([a-z ]+?)\s*\|\s*([a-z, ]+?)\s*\|`)
)

// lifecycleDoc returns the edges of the first state diagram after the
// heading "### The task lifecycle" in doc, as "from --event--> to", and the
// rows of the first table after it whose header starts "| event | in |",
// as event → phases.
func lifecycleDoc(t *testing.T, doc string) (edges map[string]bool, inPlace map[string]string) {
	t.Helper()
	_, sec, ok := strings.Cut(doc, "### The task lifecycle")
	if !ok {
		t.Fatal("no section \"The task lifecycle\"")
	}
	edges, inPlace = map[string]bool{}, map[string]string{}
	lines := strings.Split(sec, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "```mermaid") })
	if i < 0 || i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "stateDiagram-v2" {
		t.Fatal("no mermaid stateDiagram-v2 in the section")
	}
	for _, l := range lines[i+2:] {
		if strings.HasPrefix(l, "```") {
			break
		}
		m := stateEdge.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		for _, ev := range strings.Split(m[3], ",") {
			edges[m[1]+" --"+strings.TrimSpace(ev)+"--> "+m[2]] = true
		}
	}
	j := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| event | in |") })
	if j < 0 {
		t.Fatal("no table of the events that leave the phase (| event | in | ...)")
	}
	for _, l := range lines[j+2:] {
		m := inPlaceRow.FindStringSubmatch(l)
		if m == nil {
			break
		}
		inPlace[m[1]] = m[2]
	}
	return edges, inPlace
}

package httpapi

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/handoffhq/handoff/api"
	"gopkg.in/yaml.v3"
)

// The OpenAPI description of the API, api/openapi.yaml, is checked against
// the code both ways: every route, query parameter, wire type field and
// error code of the code is in the spec, and everything the spec names is
// in the code.

const specPath = "../api/openapi.yaml"

// codesPath is the file that declares the API's error codes.
const codesPath = "../api/errors.go"

// wireTypes are the Go types behind the spec's schemas, by schema name.
var wireTypes = map[string]reflect.Type{
	"View":            reflect.TypeFor[api.View](),
	"TaskView":        reflect.TypeFor[api.TaskView](),
	"KV":              reflect.TypeFor[api.KV](),
	"CommitRequest":   reflect.TypeFor[api.CommitRequest](),
	"CommitResult":    reflect.TypeFor[api.CommitResult](),
	"ReleaseResult":   reflect.TypeFor[api.ReleaseResult](),
	"ScanResult":      reflect.TypeFor[api.ScanResult](),
	"GetRequest":      reflect.TypeFor[api.GetRequest](),
	"GetResult":       reflect.TypeFor[api.GetResult](),
	"Health":          reflect.TypeFor[Health](),
	"LeaveStatus":     reflect.TypeFor[api.LeaveStatus](),
	"LearnerProgress": reflect.TypeFor[api.LearnerProgress](),
	"GroupView":       reflect.TypeFor[api.GroupView](),
	"MemberView":      reflect.TypeFor[api.MemberView](),
	"GroupTask":       reflect.TypeFor[api.GroupTask](),
	"ErrorBody":       reflect.TypeFor[api.ErrorBody](),
}

// specOnlySchemas are schemas with no Go struct of their own (enums).
var specOnlySchemas = []string{"MemberState"}

type spec struct {
	Paths      map[string]map[string]operation `yaml:"paths"`
	Components struct {
		Schemas    map[string]schema    `yaml:"schemas"`
		Parameters map[string]parameter `yaml:"parameters"`
	} `yaml:"components"`
}

type operation struct {
	Parameters  []parameter `yaml:"parameters"`
	RequestBody *struct {
		Content map[string]any `yaml:"content"`
	} `yaml:"requestBody"`
	Responses map[string]struct {
		Content map[string]any `yaml:"content"`
	} `yaml:"responses"`
}

type parameter struct {
	Ref  string `yaml:"$ref"`
	Name string `yaml:"name"`
	In   string `yaml:"in"`
}

type schema struct {
	Ref             string            `yaml:"$ref"`
	Type            schemaType        `yaml:"type"`
	Format          string            `yaml:"format"`
	ContentEncoding string            `yaml:"contentEncoding"`
	Required        []string          `yaml:"required"`
	Properties      map[string]schema `yaml:"properties"`
	Items           *schema           `yaml:"items"`
	Enum            []string          `yaml:"enum"`
}

// schemaType is a schema's type: one name, or a list of them (OpenAPI
// 3.1), of which only "null" may go beside the one the field has.
type schemaType []string

func (st *schemaType) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*st = schemaType{n.Value}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return err
	}
	*st = list
	return nil
}

// is reports whether the type is want, maybe nullable.
func (st schemaType) is(want string) bool {
	found := false
	for _, t := range st {
		switch t {
		case want:
			found = true
		case "null":
		default:
			return false
		}
	}
	return found
}

func loadSpec(t *testing.T) spec {
	t.Helper()
	b, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var s spec
	if err := yaml.Unmarshal(b, &s); err != nil {
		t.Fatalf("parse %s: %v", specPath, err)
	}
	return s
}

// specRoute turns a chi pattern into the spec's path: the wildcard of
// GET /tasks/{id}/state/* is the key.
func specRoute(pattern string) string {
	if p, ok := strings.CutSuffix(pattern, "/*"); ok {
		return p + "/{key}"
	}
	return pattern
}

// codeRoutes walks the real router: "GET /assignment" → handler name.
func codeRoutes(t *testing.T) map[string]bool {
	t.Helper()
	s := New(nil, Options{})
	out := map[string]bool{}
	err := chi.Walk(s.routes(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		out[method+" "+specRoute(route)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOpenAPIRoutes(t *testing.T) {
	s := loadSpec(t)
	code := codeRoutes(t)
	inSpec := map[string]bool{}
	for path, ops := range s.Paths {
		for method := range ops {
			inSpec[strings.ToUpper(method)+" "+path] = true
		}
	}
	for r := range code {
		if !inSpec[r] {
			t.Errorf("route %s is served but not in %s", r, specPath)
		}
	}
	for r := range inSpec {
		if !code[r] {
			t.Errorf("%s describes %s, which the router does not serve", specPath, r)
		}
	}
}

// codeQueryParams reads, for each route, the query parameters its handler
// accepts: the names passed to s.query in handlers.go and query.go, for the handler
// routes() registers for the route in server.go.
func codeQueryParams(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	parse := func(name string) *ast.File {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// handler name → query parameters.
	params := map[string][]string{}
	for _, decl := range append(parse("handlers.go").Decls, parse("query.go").Decls...) {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "query" || len(call.Args) < 2 {
				return true
			}
			for _, a := range call.Args[2:] {
				if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					params[fn.Name.Name] = append(params[fn.Name.Name], v)
				}
			}
			return true
		})
	}
	// route → handler name, from r.Get("/path", s.handler) calls.
	out := map[string][]string{}
	ast.Inspect(parse("server.go"), func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 2 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		method := strings.ToUpper(sel.Sel.Name)
		if !slices.Contains([]string{"GET", "POST", "PUT", "DELETE", "PATCH"}, method) {
			return true
		}
		lit, ok1 := call.Args[0].(*ast.BasicLit)
		h, ok2 := call.Args[1].(*ast.SelectorExpr)
		if !ok1 || !ok2 {
			return true
		}
		path, _ := strconv.Unquote(lit.Value)
		out[method+" "+specRoute(path)] = params[h.Sel.Name]
		return true
	})
	return out
}

func TestOpenAPIQueryParameters(t *testing.T) {
	s := loadSpec(t)
	code := codeQueryParams(t)
	if len(code) == 0 {
		t.Fatal("found no route registrations in server.go")
	}
	for path, ops := range s.Paths {
		for method, op := range ops {
			route := strings.ToUpper(method) + " " + path
			var inSpec []string
			for _, p := range op.Parameters {
				if p.Ref != "" {
					p = s.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
				}
				if p.In == "query" {
					inSpec = append(inSpec, p.Name)
				}
			}
			inCode := code[route]
			sort.Strings(inSpec)
			inCode = slices.Sorted(slices.Values(inCode))
			if !slices.Equal(inSpec, inCode) {
				t.Errorf("%s: query parameters in %s are %q, the handler accepts %q", route, specPath, inSpec, inCode)
			}
		}
	}
}

// jsonField is a struct field as encoding/json sees it.
type jsonField struct {
	name      string
	omitempty bool
	typ       reflect.Type
}

func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, omitempty: strings.Contains(opts, "omitempty"), typ: f.Type})
	}
	return out
}

// bytesType is declared beside the strict decoder.
var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[time.Duration]()
)

// checkType reports how s, the schema of a field, disagrees with the
// field's Go type t (JSON as encoding/json writes it), or "".
func checkType(t reflect.Type, s schema) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s.Ref != "" {
		name := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		if wt, ok := wireTypes[name]; ok {
			if wt != t {
				return "refers to " + name + ", the field is a " + t.String()
			}
			return ""
		}
		if t.Kind() == reflect.String {
			return "" // an enum schema
		}
		return "refers to " + name + ", the field is a " + t.String()
	}
	want := ""
	switch {
	case t == bytesType:
		if s.ContentEncoding != "base64" {
			return "is bytes in Go: give it contentEncoding: base64"
		}
		want = "string"
	case t == timeType:
		if s.Format != "date-time" {
			return "is a time in Go: give it format: date-time"
		}
		want = "string"
	case t == durationType:
		want = "integer"
	case t.Kind() == reflect.String:
		want = "string"
	case t.Kind() == reflect.Bool:
		want = "boolean"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		want = "integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		want = "number"
	case t.Kind() == reflect.Slice:
		if !s.Type.is("array") || s.Items == nil {
			return "is a slice in Go: give it type: array and items"
		}
		if msg := checkType(t.Elem(), *s.Items); msg != "" {
			return "items " + msg
		}
		return ""
	case t.Kind() == reflect.Struct:
		return "is a " + t.String() + " in Go: refer to its schema"
	}
	if !s.Type.is(want) {
		return "has type " + strconv.Quote(strings.Join(s.Type, ", ")) + ", want " + strconv.Quote(want) + " for Go " + t.String()
	}
	return ""
}

func TestOpenAPISchemas(t *testing.T) {
	s := loadSpec(t)
	for name, typ := range wireTypes {
		sc, ok := s.Components.Schemas[name]
		if !ok {
			t.Errorf("%s has no schema %s for %s", specPath, name, typ)
			continue
		}
		var required []string
		fields := map[string]bool{}
		for _, f := range jsonFields(typ) {
			fields[f.name] = true
			if !f.omitempty {
				required = append(required, f.name)
			}
			p, ok := sc.Properties[f.name]
			if !ok {
				t.Errorf("%s.%s (%s) is not a property in %s", name, f.name, typ, specPath)
				continue
			}
			if msg := checkType(f.typ, p); msg != "" {
				t.Errorf("%s.%s in %s %s", name, f.name, specPath, msg)
			}
		}
		for p := range sc.Properties {
			if !fields[p] {
				t.Errorf("%s.%s is in %s but %s has no such JSON field", name, p, specPath, typ)
			}
		}
		// A field without omitempty is always in the JSON: required.
		slices.Sort(required)
		got := slices.Sorted(slices.Values(sc.Required))
		if !slices.Equal(got, required) {
			t.Errorf("%s in %s requires %q; the fields always present (no omitempty) are %q", name, specPath, got, required)
		}
	}
	for name := range s.Components.Schemas {
		if _, ok := wireTypes[name]; !ok && !slices.Contains(specOnlySchemas, name) {
			t.Errorf("%s has schema %s, which is no wire type of api or httpapi", specPath, name)
		}
	}
}

// codeErrorCodes reads the values of the Code* constants of api/errors.go.
func codeErrorCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), codesPath, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
					v, _ := strconv.Unquote(lit.Value)
					out = append(out, v)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestOpenAPIErrorCodes(t *testing.T) {
	s := loadSpec(t)
	code := codeErrorCodes(t)
	if len(code) == 0 {
		t.Fatalf("found no Code* constants in %s", codesPath)
	}
	inSpec := slices.Sorted(slices.Values(s.Components.Schemas["ErrorBody"].Properties["code"].Enum))
	if !slices.Equal(inSpec, code) {
		t.Errorf("ErrorBody.code in %s lists %q; %s defines %q", specPath, inSpec, codesPath, code)
	}
}

// TestOpenAPIIsValidYAML keeps the file loadable by tools that read it as
// plain YAML, and checks the version it declares.
func TestOpenAPIIsValidYAML(t *testing.T) {
	b, err := os.ReadFile(filepath.Clean(specPath))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1") {
		t.Errorf("openapi = %q, want 3.1.x", v)
	}
}

// walk calls fn for every mapping in the YAML document v, with its path.
func walk(v any, path string, fn func(path string, m map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		fn(path, v)
		for k, c := range v {
			walk(c, path+"/"+k, fn)
		}
	case []any:
		for i, c := range v {
			walk(c, path+"/"+strconv.Itoa(i), fn)
		}
	}
}

func loadDoc(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestOpenAPIRefs checks that every $ref points at something in the file.
func TestOpenAPIRefs(t *testing.T) {
	doc := loadDoc(t)
	walk(doc, "", func(path string, m map[string]any) {
		ref, ok := m["$ref"].(string)
		if !ok {
			return
		}
		var cur any = doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			next, ok := cur.(map[string]any)[part]
			if !ok {
				t.Errorf("%s: $ref %s points at nothing", path, ref)
				return
			}
			cur = next
		}
	})
}

// TestOpenAPIExamples decodes every JSON example whose schema is a wire
// type into that type, refusing unknown fields, so that the examples say
// what the agent really sends and accepts.
func TestOpenAPIExamples(t *testing.T) {
	doc := loadDoc(t)
	checked := 0
	walk(doc, "", func(path string, m map[string]any) {
		media, ok := m["application/json"].(map[string]any)
		if !ok {
			return
		}
		sc, _ := media["schema"].(map[string]any)
		ref, _ := sc["$ref"].(string)
		typ, ok := wireTypes[strings.TrimPrefix(ref, "#/components/schemas/")]
		if !ok {
			return
		}
		var examples []any
		if ex, ok := media["example"]; ok {
			examples = append(examples, ex)
		}
		if exs, ok := media["examples"].(map[string]any); ok {
			for _, e := range exs {
				examples = append(examples, e.(map[string]any)["value"])
			}
		}
		for _, ex := range examples {
			b, err := json.Marshal(ex)
			if err != nil {
				t.Errorf("%s: example is not JSON: %v", path, err)
				continue
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(reflect.New(typ).Interface()); err != nil {
				t.Errorf("%s: example %s does not decode as %s: %v", path, b, typ, err)
			}
			checked++
		}
	})
	if checked < 10 {
		t.Errorf("checked %d examples; the walk missed the spec's examples", checked)
	}
}

// mediaSamples are valid bodies of the routes that take one, by media type.
var mediaSamples = map[string]map[string][]byte{
	"POST /tasks/{id}/commit": {
		api.MediaJSON:   []byte(`{"puts":[{"key":"YQ==","value":"MQ=="}],"epoch":3}`),
		api.MediaBinary: api.AppendCommitBinary(nil, api.CommitRequest{Puts: []api.KV{{Key: []byte("a"), Value: []byte("1")}}, Epoch: 3}),
	},
	"POST /tasks/{id}/get": {
		api.MediaJSON:   []byte(`{"keys":["YQ=="]}`),
		api.MediaBinary: api.AppendGetBinary(nil, [][]byte{[]byte("a")}),
	},
	"POST /query/tasks/{id}/get": {
		api.MediaJSON:   []byte(`{"keys":["YQ=="]}`),
		api.MediaBinary: api.AppendGetBinary(nil, [][]byte{[]byte("a")}),
	},
}

// TestOpenAPIMediaTypes checks, by calling the routes, the media types the
// spec gives each: a route takes a body in each type its requestBody lists
// and refuses the others with 415, a route whose body the spec does not
// describe takes none of them, and a route answers 200 in the types its
// 200 response lists, binary when Accept asks for it and the spec lists it.
func TestOpenAPIMediaTypes(t *testing.T) {
	s := loadSpec(t)
	concrete := strings.NewReplacer("{id}", "t1", "{key}", "a")
	for path, ops := range s.Paths {
		for method, op := range ops {
			route := strings.ToUpper(method) + " " + path
			target := concrete.Replace(path)
			samples := mediaSamples[route]
			if op.RequestBody == nil {
				if route == "POST /leave" || route == "POST /tasks/{id}/release" {
					continue // no body, whatever its type
				}
				if strings.ToUpper(method) == "POST" {
					if r := serve(New(seeded(), Options{}).Handler(), "POST", target, []byte("x"), http.Header{"Content-Type": {"text/plain"}}); r.status == 415 {
						t.Errorf("%s takes a typed body, but %s describes none", route, specPath)
					}
				}
			} else {
				for _, mt := range []string{api.MediaJSON, api.MediaBinary} {
					_, listed := op.RequestBody.Content[mt]
					body, ok := samples[mt]
					if !ok {
						body = samples[api.MediaJSON]
					}
					if listed && !ok {
						t.Errorf("%s: the test has no %s sample body", route, mt)
						continue
					}
					r := serve(New(seeded(), Options{}).Handler(), "POST", target, body, http.Header{"Content-Type": {mt}})
					switch {
					case listed && r.status != 200:
						t.Errorf("%s with a %s body = %d %s; %s lists the type", route, mt, r.status, r.body, specPath)
					case !listed && r.status != 415:
						t.Errorf("%s with a %s body = %d, but %s does not list the type", route, mt, r.status, specPath)
					}
				}
			}
			ok200, has := op.Responses["200"]
			if !has {
				continue
			}
			_, binListed := ok200.Content[api.MediaBinary]
			for _, accept := range []string{"", api.MediaBinary} {
				r := serve(New(seeded(), Options{Metrics: http.NotFoundHandler()}).Handler(), strings.ToUpper(method), target,
					samples[api.MediaJSON], http.Header{"Accept": {accept}})
				if r.status != 200 {
					continue // the route needs another state of the fake (a revoked task, ...)
				}
				ct, _, _ := strings.Cut(r.header.Get("Content-Type"), ";")
				if _, listed := ok200.Content[ct]; !listed && len(ok200.Content) > 0 {
					t.Errorf("%s with Accept %q answered %s, which %s does not list for 200", route, accept, ct, specPath)
				}
				if accept == api.MediaBinary && binListed && ct != api.MediaBinary {
					t.Errorf("%s with Accept %s answered %s; %s lists the binary form", route, accept, ct, specPath)
				}
			}
		}
	}
}

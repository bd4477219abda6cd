package httpapi

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

func TestQueryRoutes(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		target    string
		body      string
		setup     func(f *httpapitest.Backend)
		status    int
		code      string
		check     func(t *testing.T, f *httpapitest.Backend, r response)
		noHeaders bool // no copy answered: no Handoff-* headers
	}{
		{name: "get", method: "GET", target: "/query/tasks/t1/state/a", status: 200, check: func(t *testing.T, f *httpapitest.Backend, r response) {
			if string(r.body) != "1" {
				t.Errorf("body = %q, want 1", r.body)
			}
			if !f.Last().Query.Bound.Latest() || f.Last().Query.Kind != api.QueryGet || string(f.Last().Query.Keys[0]) != "a" {
				t.Errorf("query = %+v, want a get of key a with the default bound", f.Last().Query)
			}
		}},
		{name: "get of a learner's copy", method: "GET", target: "/query/tasks/t2/state/a?max_lag=10", status: 404, code: api.CodeNotFound, check: func(t *testing.T, f *httpapitest.Backend, r response) {
			if r.header.Get(api.HeaderRole) != api.RoleLearner {
				t.Errorf("%s = %q, want learner", api.HeaderRole, r.header.Get(api.HeaderRole))
			}
			if b := f.Last().Query.Bound; !b.Lagged || b.MaxLag != 10 {
				t.Errorf("bound = %+v, want max_lag 10", b)
			}
		}},
		{name: "get absent key", method: "GET", target: "/query/tasks/t1/state/zz", status: 404, code: api.CodeNotFound},
		{name: "get min_seq", method: "GET", target: "/query/tasks/t1/state/a?min_seq=7&timeout=2s", status: 200, check: func(t *testing.T, f *httpapitest.Backend, _ response) {
			if f.Last().Query.Bound.MinSeq != 7 || f.Last().Query.Timeout != 2*time.Second {
				t.Errorf("query = %+v, want min_seq 7 and timeout 2s", f.Last().Query)
			}
		}},
		{name: "get min_seq past every copy", method: "GET", target: "/query/tasks/t1/state/a?min_seq=8", status: 503, code: api.CodeUnavailable, noHeaders: true, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			if r.header.Get("Retry-After") == "" {
				t.Errorf("a 503 without Retry-After")
			}
		}},
		{name: "timeout capped", method: "GET", target: "/query/tasks/t1/state/a?timeout=10m", status: 200, check: func(t *testing.T, f *httpapitest.Backend, _ response) {
			if f.Last().Query.Timeout != api.MaxQueryTimeout {
				t.Errorf("timeout = %s, want it capped at %s", f.Last().Query.Timeout, api.MaxQueryTimeout)
			}
		}},
		{name: "bad min_seq", method: "GET", target: "/query/tasks/t1/state/a?min_seq=-1", status: 400, code: api.CodeInvalid, noHeaders: true},
		{name: "bad max_lag", method: "GET", target: "/query/tasks/t1/state/a?max_lag=x", status: 400, code: api.CodeInvalid, noHeaders: true},
		{name: "bad timeout", method: "GET", target: "/query/tasks/t1/state/a?timeout=0s", status: 400, code: api.CodeInvalid, noHeaders: true},
		{name: "unknown parameter", method: "GET", target: "/query/tasks/t1/state/a?minseq=1", status: 400, code: api.CodeInvalid, noHeaders: true},
		{name: "stateless task", method: "GET", target: "/query/tasks/s1/state/a", setup: func(f *httpapitest.Backend) {
			f.Set("s1", httpapitest.Task{Role: api.RoleActive, Stateless: true})
		}, status: 400, code: api.CodeInvalid, noHeaders: true},
		{name: "unknown task", method: "GET", target: "/query/tasks/nope/state/a", status: 404, code: api.CodeUnknownTask, noHeaders: true},
		{name: "bad task ID", method: "GET", target: "/query/tasks/a.b/state/a", status: 400, code: api.CodeInvalid, noHeaders: true},
		{name: "batch get", method: "POST", target: "/query/tasks/t1/get?min_seq=3", body: `{"keys":["YQ==","eno="]}`, status: 200, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			var res api.GetResult
			mustJSON(t, r.body, &res)
			if len(res.Values) != 2 || string(res.Values[0]) != "1" || res.Values[1] != nil {
				t.Errorf("values = %q, want [1 null]", res.Values)
			}
		}},
		{name: "batch get no body type", method: "POST", target: "/query/tasks/t1/get", body: `{"keys":[]}`, setup: nil, status: 200},
		{name: "batch get null body", method: "POST", target: "/query/tasks/t1/get", body: `null`, status: 400, code: api.CodeInvalid, noHeaders: true},
		{name: "batch get keys missing", method: "POST", target: "/query/tasks/t1/get", body: `{}`, status: 400, code: api.CodeInvalid, noHeaders: true},
		{name: "batch get null keys", method: "POST", target: "/query/tasks/t1/get", body: `{"keys":null}`, status: 400, code: api.CodeInvalid, noHeaders: true},
		{name: "scan", method: "GET", target: "/query/tasks/t1/state?prefix=b&limit=1&max_lag=0", status: 200, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			var res api.ScanResult
			mustJSON(t, r.body, &res)
			if len(res.Items) != 1 || string(res.Items[0].Key) != "b" || string(res.Next) != "ba" {
				t.Errorf("scan = %+v, want b and next ba", res)
			}
		}},
		{name: "scan unknown parameter", method: "GET", target: "/query/tasks/t1/state?lag=1", status: 400, code: api.CodeInvalid, noHeaders: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := seeded()
			f.SetSeq("t1", 7)
			if tc.setup != nil {
				tc.setup(f)
			}
			s := New(f, Options{})
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			r := serve(s.Handler(), tc.method, tc.target, body, nil)
			if r.status != tc.status {
				t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.target, r.status, r.body, tc.status)
			}
			if tc.code != "" {
				if e := r.errBody(t); e.Code != tc.code {
					t.Errorf("code = %q, want %q", e.Code, tc.code)
				}
			}
			served := r.header.Get(api.HeaderServedBy)
			if tc.noHeaders && served != "" {
				t.Errorf("%s = %q on an answer no copy gave", api.HeaderServedBy, served)
			}
			if !tc.noHeaders {
				seq, err := strconv.ParseUint(r.header.Get(api.HeaderSeq), 10, 64)
				if served != "m1" || err != nil || r.header.Get(api.HeaderRouted) != "false" || r.header.Get(api.HeaderRole) == "" {
					t.Errorf("headers %v, want the member, role, seq and routed of the copy that answered", r.header)
				}
				_ = seq
			}
			if tc.check != nil {
				tc.check(t, f, r)
			}
		})
	}
}

// TestQueryNeedsTheToken: the query routes are behind the API's token
// like the worker's.
func TestQueryNeedsTheToken(t *testing.T) {
	s := New(seeded(), Options{Token: "secret"})
	r := serve(s.Handler(), "GET", "/query/tasks/t1/state/a", nil, nil)
	if r.status != http.StatusUnauthorized {
		t.Fatalf("a query without the token = %d, want 401", r.status)
	}
	r = serve(s.Handler(), "GET", "/query/tasks/t1/state/a", nil, http.Header{"Authorization": {"Bearer secret"}})
	if r.status != http.StatusOK {
		t.Fatalf("a query with the token = %d %s, want 200", r.status, r.body)
	}
}

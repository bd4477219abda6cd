package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
	"github.com/rs/zerolog"
)

// response is what a test request got back.
type response struct {
	status int
	header http.Header
	body   []byte
}

// errBody decodes an error response; it fails the test if the body is not
// the API's error JSON.
func (r response) errBody(t *testing.T) api.ErrorBody {
	t.Helper()
	var e api.ErrorBody
	if err := json.Unmarshal(r.body, &e); err != nil || e.Code == "" || e.Message == "" {
		t.Fatalf("error body %q is not {code, message} JSON (err %v)", r.body, err)
	}
	return e
}

// serve runs one request through h without a network, as a worker sends
// it: to localhost, a body as JSON (hdr may say otherwise).
func serve(h http.Handler, method, target string, body []byte, hdr http.Header) response {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	req.Host = "localhost:7070"
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// seeded returns a fake with an active task t1 (epoch 3, a few keys), a
// learner t2 and an active t3 that is being revoked.
func seeded() *httpapitest.Backend {
	f := httpapitest.New()
	f.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 3, Data: map[string]string{"a": "1", "b": "2", "ba": "3", "\x00\xff": "bin", "x/y": "slash"}})
	f.Set("t2", httpapitest.Task{Role: api.RoleLearner, Epoch: 1})
	f.Set("t3", httpapitest.Task{Role: api.RoleActive, Epoch: 5, Data: map[string]string{"k": "v"}})
	f.Revoke("t3")
	return f
}

func TestRoutes(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "handoff_up 1\n") })
	tests := []struct {
		name   string
		method string
		target string
		body   string
		opts   Options
		setup  func(f *httpapitest.Backend)
		status int
		code   string // for errors
		// mutates says whether the Backend's mutating methods may be called.
		mutates bool
		check   func(t *testing.T, f *httpapitest.Backend, r response)
	}{
		// assignment
		{name: "assignment now", method: "GET", target: "/assignment", status: 200, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			var v api.View
			mustJSON(t, r.body, &v)
			if v.Member != "m1" || len(v.Tasks) != 3 || len(v.Revoke) != 1 || v.Revoke[0] != "t3" {
				t.Errorf("view = %+v, want m1 with 3 tasks and t3 revoked", v)
			}
		}},
		{name: "assignment version past after", method: "GET", target: "/assignment?wait=60s&after=1", status: 200, check: func(t *testing.T, f *httpapitest.Backend, _ response) {
			if n := f.Calls("WaitAssignment"); n != 0 {
				t.Errorf("WaitAssignment called %d times, want 0 (the view is already newer)", n)
			}
		}},
		{name: "assignment empty lists are arrays", method: "GET", target: "/assignment", setup: func(f *httpapitest.Backend) {
			f.Clear()
		}, status: 200, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			if !bytes.Contains(r.body, []byte(`"tasks":[]`)) || !bytes.Contains(r.body, []byte(`"revoke":[]`)) {
				t.Errorf("body %s, want tasks and revoke as []", r.body)
			}
		}},
		{name: "assignment bad wait", method: "GET", target: "/assignment?wait=soon", status: 400, code: api.CodeInvalid},
		{name: "assignment negative wait", method: "GET", target: "/assignment?wait=-1s", status: 400, code: api.CodeInvalid},
		{name: "assignment bad after", method: "GET", target: "/assignment?wait=1s&after=-1", status: 400, code: api.CodeInvalid},
		{name: "assignment unknown parameter", method: "GET", target: "/assignment?wiat=30s", status: 400, code: api.CodeInvalid},
		{name: "assignment repeated parameter", method: "GET", target: "/assignment?after=1&after=2", status: 400, code: api.CodeInvalid},
		{name: "assignment malformed query", method: "GET", target: "/assignment?after=%zz", status: 400, code: api.CodeInvalid},
		{name: "assignment wrong method", method: "POST", target: "/assignment", status: 405, code: api.CodeMethodNotAllowed, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			if got := r.header.Get("Allow"); got != "GET" {
				t.Errorf("Allow = %q, want GET", got)
			}
		}},

		// release
		{name: "release revoked task", method: "POST", target: "/tasks/t3/release", status: 200, mutates: true, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			var res api.ReleaseResult
			mustJSON(t, r.body, &res)
			if res != (api.ReleaseResult{Task: "t3", Epoch: 5}) {
				t.Errorf("release = %+v, want t3 at epoch 5", res)
			}
		}},
		{name: "release not revoked", method: "POST", target: "/tasks/t1/release", status: 409, code: api.CodeNotRevoked, mutates: true},
		{name: "release at its epoch", method: "POST", target: "/tasks/t3/release?epoch=5", status: 200, mutates: true},
		{name: "release at another epoch", method: "POST", target: "/tasks/t3/release?epoch=4", status: 409, code: api.CodeNotOwner, mutates: true},
		{name: "release bad epoch", method: "POST", target: "/tasks/t3/release?epoch=x", status: 400, code: api.CodeInvalid},
		{name: "release zero epoch", method: "POST", target: "/tasks/t3/release?epoch=0", status: 400, code: api.CodeInvalid},
		{name: "release unknown parameter", method: "POST", target: "/tasks/t3/release?seq=1", status: 400, code: api.CodeInvalid},
		{name: "release unknown task", method: "POST", target: "/tasks/nope/release", status: 404, code: api.CodeUnknownTask, mutates: true},
		{name: "release invalid task ID", method: "POST", target: "/tasks/a.b/release", status: 400, code: api.CodeInvalid},
		{name: "release task ID too long", method: "POST", target: "/tasks/" + strings.Repeat("a", 129) + "/release", status: 400, code: api.CodeInvalid},
		{name: "release percent-encoded task ID", method: "POST", target: "/tasks/t%31/release", status: 400, code: api.CodeInvalid},
		{name: "release wrong method", method: "GET", target: "/tasks/t3/release", status: 405, code: api.CodeMethodNotAllowed},

		// get
		{name: "get", method: "GET", target: "/tasks/t1/state/a", status: 200, check: wantRaw("1")},
		{name: "get binary key", method: "GET", target: "/tasks/t1/state/%00%FF", status: 200, check: wantRaw("bin")},
		{name: "get key with encoded slash", method: "GET", target: "/tasks/t1/state/x%2Fy", status: 200, check: wantRaw("slash")},
		{name: "get key with plain slash", method: "GET", target: "/tasks/t1/state/x/y", status: 200, check: wantRaw("slash")},
		{name: "get missing key", method: "GET", target: "/tasks/t1/state/zz", status: 404, code: api.CodeNotFound},
		{name: "get learner task", method: "GET", target: "/tasks/t2/state/a", status: 409, code: api.CodeNotOwner, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			if e := r.errBody(t); !strings.Contains(e.Message, "learner") {
				t.Errorf("message %q does not say the task is a learner", e.Message)
			}
		}},
		{name: "get unknown task", method: "GET", target: "/tasks/nope/state/a", status: 404, code: api.CodeUnknownTask},
		{name: "get empty key", method: "GET", target: "/tasks/t1/state/", status: 400, code: api.CodeInvalid},
		{name: "get key too long", method: "GET", target: "/tasks/t1/state/" + strings.Repeat("k", 9), opts: Options{MaxKeyBytes: 8}, status: 400, code: api.CodeInvalid},
		{name: "get invalid task ID", method: "GET", target: "/tasks/t%201/state/a", status: 400, code: api.CodeInvalid},
		{name: "get backend internal error", method: "GET", target: "/tasks/t1/state/a", setup: func(f *httpapitest.Backend) {
			f.Fail("Get", errors.New("pebble: disk on fire"))
		}, status: 500, code: api.CodeInternal, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			if e := r.errBody(t); strings.Contains(e.Message, "disk on fire") {
				t.Errorf("message %q leaks the internal error", e.Message)
			}
		}},

		// scan
		{name: "scan all", method: "GET", target: "/tasks/t1/state", status: 200, check: wantScan(5, "")},
		{name: "scan prefix", method: "GET", target: "/tasks/t1/state?prefix=b", status: 200, check: wantScan(2, "")},
		{name: "scan prefix_b64", method: "GET", target: "/tasks/t1/state?prefix_b64=AP8=", status: 200, check: wantScan(1, "")},
		{name: "scan prefix_b64 with unencoded plus", method: "GET", target: "/tasks/t1/state?prefix_b64=+w", status: 200, check: func(t *testing.T, f *httpapitest.Backend, _ response) {
			if got := f.Last().Scan.Prefix; !bytes.Equal(got, []byte{0xfb}) {
				t.Errorf("prefix = %x, want fb", got)
			}
		}},
		{name: "scan start", method: "GET", target: "/tasks/t1/state?start=b", status: 200, check: wantScan(3, "")},
		{name: "scan limit sets next", method: "GET", target: "/tasks/t1/state?limit=2", status: 200, check: wantScan(2, "b")},
		{name: "scan limit cut to max", method: "GET", target: "/tasks/t1/state?limit=1000", opts: Options{MaxScanLimit: 3}, status: 200, check: wantScan(3, "ba")},
		{name: "scan both prefix forms", method: "GET", target: "/tasks/t1/state?prefix=a&prefix_b64=YQ==", status: 400, code: api.CodeInvalid},
		{name: "scan bad base64", method: "GET", target: "/tasks/t1/state?start_b64=!!", status: 400, code: api.CodeInvalid},
		{name: "scan zero limit", method: "GET", target: "/tasks/t1/state?limit=0", status: 400, code: api.CodeInvalid},
		{name: "scan non-numeric limit", method: "GET", target: "/tasks/t1/state?limit=ten", status: 400, code: api.CodeInvalid},
		{name: "scan unknown parameter", method: "GET", target: "/tasks/t1/state?from=a", status: 400, code: api.CodeInvalid},
		{name: "scan learner task", method: "GET", target: "/tasks/t2/state", status: 409, code: api.CodeNotOwner},
		{name: "scan unknown task", method: "GET", target: "/tasks/nope/state", status: 404, code: api.CodeUnknownTask},
		{name: "scan invalid task ID", method: "GET", target: "/tasks/%2F/state", status: 400, code: api.CodeInvalid},

		// commit
		{name: "commit", method: "POST", target: "/tasks/t1/commit", body: `{"puts":[{"key":"AP8=","value":"AQ=="}],"deletes":["YQ=="],"checkpoint":"AAAAAAAAAAc=","epoch":3}`,
			status: 200, mutates: true, check: func(t *testing.T, f *httpapitest.Backend, r response) {
				var res api.CommitResult
				mustJSON(t, r.body, &res)
				if res != (api.CommitResult{Task: "t1", Seq: 1, Epoch: 3}) {
					t.Errorf("commit = %+v, want t1 seq 1 epoch 3", res)
				}
				if got, _ := f.Value("t1", "\x00\xff"); got != "\x01" {
					t.Errorf("value of 00ff = %x, want 01", got)
				}
				if _, ok := f.Value("t1", "a"); ok {
					t.Errorf("key a still present after its delete")
				}
			}},
		{name: "commit checkpoint alone", method: "POST", target: "/tasks/t1/commit", body: ` {"checkpoint":"AQ=="} `, status: 200, mutates: true},
		{name: "commit deletes alone", method: "POST", target: "/tasks/t1/commit", body: `{"deletes":["YQ=="],"epoch":3}`, status: 200, mutates: true},
		{name: "commit empty object", method: "POST", target: "/tasks/t1/commit", body: ` {} `, status: 400, code: api.CodeInvalid},
		{name: "commit epoch alone", method: "POST", target: "/tasks/t1/commit", body: `{"epoch":3}`, status: 400, code: api.CodeInvalid},
		{name: "commit empty lists", method: "POST", target: "/tasks/t1/commit", body: `{"puts":[],"deletes":[],"checkpoint":""}`, status: 400, code: api.CodeInvalid},
		{name: "commit null puts", method: "POST", target: "/tasks/t1/commit", body: `{"puts":null}`, status: 400, code: api.CodeInvalid},
		{name: "commit null deletes", method: "POST", target: "/tasks/t1/commit", body: `{"deletes":null,"checkpoint":"AQ=="}`, status: 400, code: api.CodeInvalid},
		{name: "commit null epoch", method: "POST", target: "/tasks/t1/commit", body: `{"puts":[{"key":"YQ==","value":"MQ=="}],"epoch":null}`, status: 400, code: api.CodeInvalid},
		{name: "commit null put", method: "POST", target: "/tasks/t1/commit", body: `{"puts":[null]}`, status: 400, code: api.CodeInvalid},
		{name: "commit stale epoch", method: "POST", target: "/tasks/t1/commit", body: `{"checkpoint":"AQ==","epoch":2}`, status: 409, code: api.CodeNotOwner, mutates: true},
		{name: "commit learner task", method: "POST", target: "/tasks/t2/commit", body: `{"checkpoint":"AQ=="}`, status: 409, code: api.CodeNotOwner, mutates: true},
		{name: "commit unknown task", method: "POST", target: "/tasks/nope/commit", body: `{"checkpoint":"AQ=="}`, status: 404, code: api.CodeUnknownTask, mutates: true},
		{name: "commit invalid task ID", method: "POST", target: "/tasks/-%00/commit", body: `{}`, status: 400, code: api.CodeInvalid},
		{name: "commit unknown field", method: "POST", target: "/tasks/t1/commit", body: `{"put":[]}`, status: 400, code: api.CodeInvalid},
		{name: "commit trailing garbage", method: "POST", target: "/tasks/t1/commit", body: `{}{}`, status: 400, code: api.CodeInvalid},
		{name: "commit not an object", method: "POST", target: "/tasks/t1/commit", body: `null`, status: 400, code: api.CodeInvalid},
		{name: "commit without a body", method: "POST", target: "/tasks/t1/commit", status: 415, code: api.CodeUnsupportedMediaType},
		{name: "commit key not base64", method: "POST", target: "/tasks/t1/commit", body: `{"puts":[{"key":"a b","value":""}]}`, status: 400, code: api.CodeInvalid},
		{name: "commit empty put key", method: "POST", target: "/tasks/t1/commit", body: `{"puts":[{"key":"","value":"AQ=="}]}`, status: 400, code: api.CodeInvalid},
		{name: "commit missing put key", method: "POST", target: "/tasks/t1/commit", body: `{"puts":[{"value":"AQ=="}]}`, status: 400, code: api.CodeInvalid},
		{name: "commit empty delete key", method: "POST", target: "/tasks/t1/commit", body: `{"deletes":[""]}`, status: 400, code: api.CodeInvalid},
		{name: "commit duplicate key", method: "POST", target: "/tasks/t1/commit", body: `{"puts":[{"key":"YQ==","value":""}],"deletes":["YQ=="]}`, status: 400, code: api.CodeInvalid},
		{name: "commit negative epoch", method: "POST", target: "/tasks/t1/commit", body: `{"epoch":-1}`, status: 400, code: api.CodeInvalid},
		{name: "commit key too large", method: "POST", target: "/tasks/t1/commit", body: `{"puts":[{"key":"YWFh","value":""}]}`, opts: Options{MaxKeyBytes: 2}, status: 413, code: api.CodeTooLarge},
		{name: "commit delete too large", method: "POST", target: "/tasks/t1/commit", body: `{"deletes":["YWFh"]}`, opts: Options{MaxKeyBytes: 2}, status: 413, code: api.CodeTooLarge},
		{name: "commit value too large", method: "POST", target: "/tasks/t1/commit", body: `{"puts":[{"key":"YQ==","value":"YWFh"}]}`, opts: Options{MaxValueBytes: 2}, status: 413, code: api.CodeTooLarge},
		{name: "commit checkpoint too large", method: "POST", target: "/tasks/t1/commit", body: `{"checkpoint":"YWFh"}`, opts: Options{MaxValueBytes: 2}, status: 413, code: api.CodeTooLarge},
		{name: "commit body too large", method: "POST", target: "/tasks/t1/commit", body: `{"puts":[]}` + strings.Repeat(" ", 100), opts: Options{MaxBodyBytes: 64}, status: 413, code: api.CodeTooLarge},
		{name: "commit backend unavailable", method: "POST", target: "/tasks/t1/commit", body: `{"checkpoint":"AQ=="}`, setup: func(f *httpapitest.Backend) {
			f.Fail("Commit", fmt.Errorf("changelog append for task t1: %w", api.ErrUnavailable))
		}, status: 503, code: api.CodeUnavailable, mutates: true, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			if r.header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
		}},
		{name: "commit must resume", method: "POST", target: "/tasks/t1/commit", body: `{"checkpoint":"AQ=="}`, setup: func(f *httpapitest.Backend) {
			f.Fail("Commit", fmt.Errorf("an earlier commit landed without its acknowledgement: %w", api.ErrResume))
		}, status: 409, code: api.CodeResume, mutates: true, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			if r.header.Get("Retry-After") != "" {
				t.Errorf("a resume answer says Retry-After: the commit must not be retried")
			}
		}},
		{name: "commit backend invalid", method: "POST", target: "/tasks/t1/commit", body: `{"checkpoint":"AQ=="}`, setup: func(f *httpapitest.Backend) {
			f.Fail("Commit", fmt.Errorf("checkpoint must not shrink: %w", api.ErrInvalid))
		}, status: 400, code: api.CodeInvalid, mutates: true},
		{name: "commit backend too large", method: "POST", target: "/tasks/t1/commit", body: `{"checkpoint":"AQ=="}`, setup: func(f *httpapitest.Backend) {
			f.Fail("Commit", fmt.Errorf("changelog message over the stream's max: %w", api.ErrTooLarge))
		}, status: 413, code: api.CodeTooLarge, mutates: true},

		// leave, group, health, metrics
		{name: "leave", method: "POST", target: "/leave", status: 202, mutates: true, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			var st api.LeaveStatus
			mustJSON(t, r.body, &st)
			if st.State != api.StateLeaving || st.Started == nil || len(st.Remaining) != 2 {
				t.Errorf("leave = %+v, want leaving with a start time and 2 remaining tasks", st)
			}
		}},
		{name: "leave status", method: "GET", target: "/leave", status: 200, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			var st api.LeaveStatus
			mustJSON(t, r.body, &st)
			if st.State != api.StateMember || st.Started != nil {
				t.Errorf("leave status = %+v, want member, not started", st)
			}
		}},
		{name: "leave fails", method: "POST", target: "/leave", setup: func(f *httpapitest.Backend) {
			f.Fail("Leave", fmt.Errorf("record leave in NATS: %w", api.ErrUnavailable))
		}, status: 503, code: api.CodeUnavailable, mutates: true},
		{name: "group", method: "GET", target: "/group", status: 200, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			var g api.GroupView
			mustJSON(t, r.body, &g)
			if g.Group != "demo" || len(g.Members) != 1 {
				t.Errorf("group = %+v, want demo with one member", g)
			}
		}},
		{name: "group cancelled", method: "GET", target: "/group", setup: func(f *httpapitest.Backend) {
			f.Fail("Group", fmt.Errorf("read members: %w", context.DeadlineExceeded))
		}, status: 503, code: api.CodeUnavailable},
		{name: "healthz", method: "GET", target: "/healthz", status: 200},
		{name: "readyz not ready", method: "GET", target: "/readyz", setup: func(f *httpapitest.Backend) {
			f.SetReady(errors.New("joining group demo: no generation yet"))
		}, status: 503, code: api.CodeUnavailable, check: func(t *testing.T, _ *httpapitest.Backend, r response) {
			if e := r.errBody(t); !strings.Contains(e.Message, "no generation yet") {
				t.Errorf("message %q does not give the reason", e.Message)
			}
		}},
		{name: "readyz ready", method: "GET", target: "/readyz", status: 200},
		{name: "metrics disabled", method: "GET", target: "/metrics", status: 404, code: api.CodeNotFound},
		{name: "metrics", method: "GET", target: "/metrics", opts: Options{Metrics: metrics}, status: 200, check: wantRaw("handoff_up 1\n")},
		{name: "unknown route", method: "GET", target: "/tasks", status: 404, code: api.CodeNotFound},
		{name: "unknown task route", method: "GET", target: "/tasks/t1/stats", status: 404, code: api.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := seeded()
			if tt.setup != nil {
				tt.setup(f)
			}
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			r := serve(New(f, tt.opts).Handler(), tt.method, tt.target, body, nil)
			if r.status != tt.status {
				t.Fatalf("%s %s = %d %s, want %d", tt.method, tt.target, r.status, r.body, tt.status)
			}
			if tt.code != "" {
				if e := r.errBody(t); e.Code != tt.code {
					t.Errorf("%s %s code = %q, want %q", tt.method, tt.target, e.Code, tt.code)
				}
			}
			if !tt.mutates {
				if n := f.Mutations(); n != 0 {
					t.Errorf("%s %s called the Backend's mutating methods %d times, want 0", tt.method, tt.target, n)
				}
			}
			if tt.check != nil {
				tt.check(t, f, r)
			}
		})
	}
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

func wantRaw(want string) func(t *testing.T, f *httpapitest.Backend, r response) {
	return func(t *testing.T, _ *httpapitest.Backend, r response) {
		t.Helper()
		if string(r.body) != want {
			t.Errorf("body = %q, want %q", r.body, want)
		}
	}
}

// wantScan checks the number of items and the next key ("" for none).
func wantScan(n int, next string) func(t *testing.T, f *httpapitest.Backend, r response) {
	return func(t *testing.T, _ *httpapitest.Backend, r response) {
		t.Helper()
		var res api.ScanResult
		mustJSON(t, r.body, &res)
		if len(res.Items) != n || string(res.Next) != next {
			t.Errorf("scan = %d items, next %q; want %d items, next %q (body %s)", len(res.Items), res.Next, n, next, r.body)
		}
		if res.Items == nil || !bytes.Contains(r.body, []byte(`"items":[`)) {
			t.Errorf("scan body %s has no items array", r.body)
		}
	}
}

func TestScanPagesThroughEveryKey(t *testing.T) {
	f := httpapitest.New()
	data := map[string]string{}
	for i := range 10 {
		data[fmt.Sprintf("k%02d", i)] = "v"
	}
	f.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1, Data: data})
	h := New(f, Options{MaxScanLimit: 3}).Handler()
	var got []string
	target := "/tasks/t1/state"
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatalf("scan did not end after %d pages", pages)
		}
		r := serve(h, "GET", target, nil, nil)
		var res api.ScanResult
		mustJSON(t, r.body, &res)
		for _, kv := range res.Items {
			got = append(got, string(kv.Key))
		}
		if res.Next == nil {
			break
		}
		target = "/tasks/t1/state?start_b64=" + b64url(res.Next)
	}
	if len(got) != 10 || got[0] != "k00" || got[9] != "k09" {
		t.Errorf("paged scan = %v, want k00..k09 once each", got)
	}
}

func TestAuth(t *testing.T) {
	f := seeded()
	h := New(f, Options{Token: "s3cret"}).Handler()
	tests := []struct {
		name   string
		target string
		auth   string
		status int
	}{
		{"no token", "/assignment", "", 401},
		{"wrong token", "/assignment", "Bearer nope", 401},
		{"wrong scheme", "/assignment", "Basic s3cret", 401},
		{"token prefix", "/assignment", "Bearer s3cre", 401},
		{"right token", "/assignment", "Bearer s3cret", 200},
		{"scheme case-insensitive", "/assignment", "bearer s3cret", 200},
		{"state needs token", "/tasks/t1/state/a", "", 401},
		{"metrics need token", "/metrics", "", 401},
		{"healthz is open", "/healthz", "", 200},
		{"readyz is open", "/readyz", "", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := http.Header{}
			if tt.auth != "" {
				hdr.Set("Authorization", tt.auth)
			}
			r := serve(h, "GET", tt.target, nil, hdr)
			if r.status != tt.status {
				t.Fatalf("GET %s with %q = %d %s, want %d", tt.target, tt.auth, r.status, r.body, tt.status)
			}
			if tt.status == 401 {
				if e := r.errBody(t); e.Code != api.CodeUnauthorized {
					t.Errorf("code = %q, want unauthorized", e.Code)
				}
				if r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("401 without WWW-Authenticate")
				}
			}
		})
	}
	if n := f.Mutations(); n != 0 {
		t.Errorf("unauthenticated requests reached the Backend's mutating methods %d times", n)
	}
}

// longPoll starts GET /assignment?target in the background.
func longPoll(t *testing.T, h http.Handler, target string) <-chan response {
	t.Helper()
	done := make(chan response, 1)
	go func() { done <- serve(h, "GET", target, nil, nil) }()
	return done
}

func awaitResponse(t *testing.T, ch <-chan response) response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("long-poll did not answer within 10s")
		return response{}
	}
}

func awaitWaiting(t *testing.T, f *httpapitest.Backend) time.Time {
	t.Helper()
	select {
	case d := <-f.Waiting():
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll never reached WaitAssignment")
		return time.Time{}
	}
}

func TestLongPollWakesOnChange(t *testing.T) {
	f := httpapitest.New()
	h := New(f, Options{}).Handler()
	done := longPoll(t, h, "/assignment?wait=60s&after=1")
	awaitWaiting(t, f)
	select {
	case r := <-done:
		t.Fatalf("long-poll answered %d %s before the view changed", r.status, r.body)
	default:
	}
	f.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1})
	r := awaitResponse(t, done)
	var v api.View
	mustJSON(t, r.body, &v)
	if r.status != 200 || v.Version != 2 || len(v.Tasks) != 1 {
		t.Errorf("long-poll = %d version %d with %d tasks, want 200 version 2 with 1 task", r.status, v.Version, len(v.Tasks))
	}
}

func TestLongPollEndsAtWaitBound(t *testing.T) {
	tests := []struct {
		name  string
		query string
		max   time.Duration
		bound time.Duration
	}{
		{"wait", "wait=20ms&after=1", 0, 20 * time.Millisecond},
		{"capped by MaxLongPoll", "wait=1h&after=1", 30 * time.Millisecond, 30 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := httpapitest.New()
			h := New(f, Options{MaxLongPoll: tt.max}).Handler()
			start := time.Now()
			done := longPoll(t, h, "/assignment?"+tt.query)
			deadline := awaitWaiting(t, f)
			if deadline.IsZero() || deadline.After(start.Add(tt.bound).Add(time.Second)) {
				t.Errorf("WaitAssignment deadline = %v after the request, want at most %v", deadline.Sub(start), tt.bound)
			}
			r := awaitResponse(t, done)
			var v api.View
			mustJSON(t, r.body, &v)
			if r.status != 200 || v.Version != 1 {
				t.Errorf("long-poll = %d version %d, want 200 with the unchanged version 1", r.status, v.Version)
			}
		})
	}
}

func TestLongPollClientGone(t *testing.T) {
	f := httpapitest.New()
	h := New(f, Options{}).Handler()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := httptest.NewRequest("GET", "/assignment?wait=60s&after=1", nil).WithContext(ctx)
		req.Host = "localhost"
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	awaitWaiting(t, f)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("long-poll kept waiting after its client went away")
	}
}

func TestRunShutsDownLongPolls(t *testing.T) {
	f := httpapitest.New()
	addr, cancel, ran := serving(t, New(f, Options{}))

	polled := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/assignment?wait=60s&after=1")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		polled <- err
	}()
	awaitWaiting(t, f)
	cancel()
	select {
	case err := <-polled:
		if err != nil {
			t.Errorf("long-poll during shutdown: %v, want the current view", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown did not end the long-poll")
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run = %v, want nil after ctx ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Errorf("the server still answers after Run returned")
	}
}

func TestRunNeedsListen(t *testing.T) {
	if err := New(httpapitest.New(), Options{}).Run(context.Background()); err == nil {
		t.Fatal("Run without Listen = nil, want an error")
	}
}

func TestRequestLogging(t *testing.T) {
	tests := []struct {
		name  string
		level zerolog.Level
		want  bool
	}{
		{"debug logs each request", zerolog.DebugLevel, true},
		{"info does not", zerolog.InfoLevel, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			h := New(seeded(), Options{Logger: zerolog.New(&buf).Level(tt.level)}).Handler()
			serve(h, "GET", "/tasks/t1/state/zz", nil, nil)
			line := buf.String()
			got := strings.Contains(line, `"method":"GET"`) && strings.Contains(line, `"path":"/tasks/t1/state/zz"`) &&
				strings.Contains(line, `"status":404`) && strings.Contains(line, `"duration"`)
			if got != tt.want {
				t.Errorf("log = %q, want a request line: %v", line, tt.want)
			}
		})
	}
}

func TestInternalErrorIsLogged(t *testing.T) {
	var buf bytes.Buffer
	f := seeded()
	f.Fail("Scan", errors.New("pebble: disk on fire"))
	h := New(f, Options{Logger: zerolog.New(&buf).Level(zerolog.InfoLevel)}).Handler()
	if r := serve(h, "GET", "/tasks/t1/state", nil, nil); r.status != 500 {
		t.Fatalf("status = %d, want 500", r.status)
	}
	if !strings.Contains(buf.String(), "disk on fire") {
		t.Errorf("log = %q, want the backend's error", buf.String())
	}
}

func TestValidTaskID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"orders-7", true}, {"A_b-9", true}, {strings.Repeat("x", 128), true},
		{"", false}, {strings.Repeat("x", 129), false}, {"a.b", false}, {"a/b", false}, {"ä", false}, {"a b", false}, {"%41", false},
	}
	for _, tt := range tests {
		if got := ValidTaskID(tt.id); got != tt.want {
			t.Errorf("ValidTaskID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestShutdownDelivered(t *testing.T) {
	f := httpapitest.New()
	s := New(f, Options{})
	serve(s.Handler(), "GET", "/assignment", nil, nil)
	select {
	case <-s.ShutdownDelivered():
		t.Fatal("ShutdownDelivered closed before any view said shutdown")
	default:
	}
	f.Shutdown()
	serve(s.Handler(), "GET", "/assignment", nil, nil)
	select {
	case <-s.ShutdownDelivered():
	default:
		t.Fatal("ShutdownDelivered still open after a shutdown view was sent")
	}
	serve(s.Handler(), "GET", "/assignment", nil, nil) // closing twice must not panic
}

package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

// The fuzz targets feed every request body and path or query parameter of
// the API with arbitrary bytes. For all of them the API must never panic
// or answer 5xx, and input it refuses must not reach the Backend's
// mutating methods. Their seed corpora run in every plain `go test`;
// `go test -fuzz=FuzzCommitBody ./httpapi` explores further.

// fuzzOpts keeps limits small so that the fuzzer reaches them.
var fuzzOpts = Options{MaxKeyBytes: 16, MaxValueBytes: 64, MaxBodyBytes: 1024, MaxScanLimit: 4, MaxGetKeys: 4, MaxGetBytes: 16, MaxLongPoll: 1}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// serveRaw runs a request whose path and query are set verbatim, bypassing
// URL parsing, so the fuzzer controls exactly what the router sees.
func serveRaw(h http.Handler, method, path, rawQuery string, body []byte) response {
	req := httptest.NewRequest(method, "/", bytes.NewReader(body))
	req.URL.Path, req.URL.RawPath, req.URL.RawQuery = path, "", rawQuery
	req.Host = "localhost:7070"
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// checkAnswer fails on a 5xx and on an error response that is not the
// API's error JSON.
func checkAnswer(t *testing.T, r response) {
	t.Helper()
	if r.status >= 500 {
		t.Fatalf("status %d %s, want no 5xx for any input", r.status, r.body)
	}
	if r.status >= 400 {
		r.errBody(t)
	}
}

func FuzzCommitBody(f *testing.F) {
	for _, s := range []string{
		`{"puts":[{"key":"YQ==","value":"MQ=="}],"deletes":["Yg=="],"checkpoint":"AAAAAAAAAAc=","epoch":3}`,
		`{}`, ` {"epoch":3} `, `null`, `[]`, `"x"`, ``, `{`, `{}{}`, `{} x`, `{"put":[]}`,
		`{"puts":[{"key":"","value":""}]}`, `{"puts":[{"value":"AQ=="}]}`, `{"puts":[null]}`, `{"deletes":[null]}`,
		`{"puts":[{"key":"YQ==","value":"AQ=="},{"key":"YQ==","value":"Ag=="}]}`,
		`{"puts":[{"key":"YWFhYWFhYWFhYWFhYWFhYWE=","value":""}]}`,
		`{"epoch":-1}`, `{"epoch":1e3}`, `{"epoch":18446744073709551616}`, `{"checkpoint":"!!"}`,
		`{"PUTS":[]}`, "{\"puts\":[{\"key\":\"\xff\"}]}", `{"puts":[{"key":"YQ==","value":"AQ==","extra":1}]}`,
		`{"Epoch":3}`, `{"epoch":99,"epoch":3}`, `{"epoch":3,"Epoch":99}`, `{"puts":[],"puts":[{"key":"YQ==","value":""}]}`,
		`{"puts":[{"key":"YQ==","KEY":"Yg==","value":""}]}`, `{"checkpoint":"AAAA\nAAAA"}`, `{"checkpoint":"AAAA\r\nAAAA"}`,
		`{"deletes":["YR=="]}`, `{"deletes":["YQ"]}`, `{"deletes":["-_8="]}`, `{"checkpoint":null,"epoch":null}`,
		`{"puts":{"key":"YQ=="}}`, `{"epoch":{"epoch":1,"epoch":2}}`,
		`{"puts":null}`, `{"puts":null,"checkpoint":"AQ=="}`, `{"epoch":null,"checkpoint":"AQ=="}`, `{"checkpoint":"AQ=="}`,
		`{"puts":[],"deletes":[],"checkpoint":""}`, `{"deletes":["YQ=="],"checkpoint":null}`, `{"puts":[{"key":"YQ==","value":null}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fb := seeded()
		r := serveRaw(New(fb, fuzzOpts).Handler(), "POST", "/tasks/t1/commit", "", body)
		checkAnswer(t, r)
		calls := fb.Calls("Commit")
		switch {
		case r.status == 400 || r.status == 413:
			if calls != 0 {
				t.Fatalf("refused body %q (%d) reached Backend.Commit", body, r.status)
			}
			return
		case calls != 1:
			t.Fatalf("body %q answered %d without exactly one Backend.Commit (got %d)", body, r.status, calls)
		}
		// What reached the Backend is what the body says, and within limits.
		got := fb.Last().Commit
		var want api.CommitRequest
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("accepted body %q that encoding/json refuses: %v", body, err)
		}
		if why := loose(body); why != "" {
			t.Fatalf("accepted body %q, which is ambiguous: %s", body, why)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Backend.Commit got %+v, body says %+v", got, want)
		}
		checkWithinLimits(t, got)
		checkNotEmpty(t, got)
	})
}

// checkNotEmpty fails the test if a commit with nothing in it (no puts,
// deletes or checkpoint) reached the Backend.
func checkNotEmpty(t *testing.T, got api.CommitRequest) {
	t.Helper()
	if len(got.Puts) == 0 && len(got.Deletes) == 0 && len(got.Checkpoint) == 0 {
		t.Fatalf("a commit with nothing in it (%+v) reached the Backend", got)
	}
}

// checkWithinLimits fails the test if a commit that reached the Backend
// holds a value, or an empty, too long or repeated key, that fuzzOpts refuse.
func checkWithinLimits(t *testing.T, got api.CommitRequest) {
	t.Helper()
	seen := map[string]bool{}
	keys := append([][]byte{}, got.Deletes...)
	for _, kv := range got.Puts {
		keys = append(keys, kv.Key)
		if len(kv.Value) > fuzzOpts.MaxValueBytes {
			t.Fatalf("a %d-byte value reached the Backend", len(kv.Value))
		}
	}
	for _, k := range keys {
		if len(k) == 0 || len(k) > fuzzOpts.MaxKeyBytes || seen[string(k)] {
			t.Fatalf("key %q (empty, too long or repeated) reached the Backend", k)
		}
		seen[string(k)] = true
	}
}

// commitNames are the JSON names of the commit body and its puts.
var commitNames = map[string]bool{"puts": true, "deletes": true, "checkpoint": true, "epoch": true, "key": true, "value": true}

// bytesNames are the JSON names whose values are bytes, and so may be
// null (the empty bytes), and listsOfBytes those of lists of bytes.
var (
	bytesNames   = map[string]bool{"key": true, "value": true, "checkpoint": true}
	listsOfBytes = map[string]bool{"deletes": true, "keys": true}
)

// loose says what in a commit body encoding/json would read in a way the
// worker may not have meant: a key that is not one of commitNames exactly, a
// key repeated in an object (in any case), a string with a line break
// (every string of a commit is base64), or a null where bytes are not due
// (encoding/json reads it as absent). It is "" for a body that has none.
func loose(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		keys   map[string]bool
		expect bool   // the next token is a key
		key    string // an object's last key; the key an array is the value of
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.expect {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			k := tok.(string)
			if !commitNames[k] {
				return fmt.Sprintf("key %q", k)
			}
			if top.keys[strings.ToLower(k)] {
				return fmt.Sprintf("key %q twice", k)
			}
			top.keys[strings.ToLower(k)] = true
			top.expect, top.key = false, k
			continue
		}
		if top != nil && top.object {
			top.expect = true
		}
		if tok == nil {
			switch {
			case top == nil:
				return "a null body"
			case top.object && !bytesNames[top.key], !top.object && !listsOfBytes[top.key]:
				return fmt.Sprintf("a null in %q", top.key)
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, keys: map[string]bool{}, expect: true})
		case json.Delim('['):
			key := ""
			if top != nil {
				key = top.key
			}
			stack = append(stack, &frame{key: key})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if str, ok := tok.(string); ok && strings.ContainsAny(str, "\r\n") {
			return "a line break in a base64 string"
		}
	}
}

func FuzzStatePath(f *testing.F) {
	for _, s := range [][2]string{
		{"t1", "a"}, {"t1", "%00%FF"}, {"t1", "x/y"}, {"t1", "x%2Fy"}, {"t1", ""}, {"t1", "%zz"}, {"t1", "a?b=c"},
		{"t1", "a#frag"}, {"t2", "a"}, {"nope", "a"}, {"", "a"}, {"a.b", "a"}, {"t%31", "a"}, {"t1/state", "a"},
		{"t1", strings.Repeat("k", 17)}, {"t1", ".."}, {"t1", "%2e%2e"}, {"t1", "\x00"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, id, key string) {
		fb := seeded()
		h := New(fb, fuzzOpts).Handler()
		req, err := http.NewRequest("GET", "http://localhost/tasks/"+id+"/state/"+key, nil)
		if err != nil {
			return // not a URL a client could send
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		r := response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
		checkAnswer(t, r)
		if n := fb.Mutations(); n != 0 {
			t.Fatalf("GET %s called mutating Backend methods %d times", req.URL, n)
		}
		// An id with a '/' shifts the path; the Backend still sees only valid IDs.
		if fb.Calls("Get") > 0 && (!ValidTaskID(fb.Last().Task) || ValidTaskID(id) && fb.Last().Task != id) {
			t.Fatalf("Backend.Get got task %q from path id %q", fb.Last().Task, id)
		}
		// A plain key percent-decodes to exactly what the Backend sees.
		if ValidTaskID(id) && !strings.ContainsAny(key, "?#") {
			want, err := url.PathUnescape(key)
			if err == nil && want != "" && len(want) <= fuzzOpts.MaxKeyBytes {
				if fb.Calls("Get") != 1 || string(fb.Last().Get) != want {
					t.Fatalf("GET .../state/%s: Backend.Get got key %q (%d calls), want %q", key, fb.Last().Get, fb.Calls("Get"), want)
				}
			}
		}
	})
}

func FuzzKey(f *testing.F) {
	for _, s := range []string{"a", "\x00\xff", "x/y", "/", "..", ".", "%", "%2F", "a b+c", "?#", strings.Repeat("k", 16), "é"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, key []byte) {
		fb := httpapitest.New()
		fb.Set("t1", httpapitest.Task{Role: api.RoleActive, Epoch: 1, Data: map[string]string{string(key): "v"}})
		h := New(fb, fuzzOpts).Handler()
		r := serve(h, "GET", "/tasks/t1/state/"+url.PathEscape(string(key)), nil, nil)
		checkAnswer(t, r)
		if len(key) == 0 || len(key) > fuzzOpts.MaxKeyBytes {
			if r.status != 400 || fb.Calls("Get") != 0 {
				t.Fatalf("key %q of %d bytes: status %d, %d Backend.Get calls; want 400 and none", key, len(key), r.status, fb.Calls("Get"))
			}
			return
		}
		if r.status != 200 || string(r.body) != "v" || !bytes.Equal(fb.Last().Get, key) {
			t.Fatalf("key %q: status %d body %q, Backend.Get saw %q; want 200 \"v\" and the key itself", key, r.status, r.body, fb.Last().Get)
		}
	})
}

func FuzzAssignmentQuery(f *testing.F) {
	for _, s := range []string{"", "wait=30s&after=1", "wait=0", "wait=1ms&after=0", "wait=-1s", "wait=1h", "after=18446744073709551615",
		"after=18446744073709551616", "wait=soon", "after=x", "wait=1s&wait=2s", "foo=bar", "%zz", "wait", "=&=", ";"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		fb := seeded()
		r := serveRaw(New(fb, fuzzOpts).Handler(), "GET", "/assignment", q, nil)
		checkAnswer(t, r)
		if r.status != 200 && r.status != 400 {
			t.Fatalf("GET /assignment?%s = %d, want 200 or 400", q, r.status)
		}
		if r.status == 200 {
			var v api.View
			if err := json.Unmarshal(r.body, &v); err != nil || v.Member != "m1" {
				t.Fatalf("GET /assignment?%s body %s is not the view (%v)", q, r.body, err)
			}
		}
		if n := fb.Mutations(); n != 0 {
			t.Fatalf("GET /assignment?%s called mutating Backend methods %d times", q, n)
		}
	})
}

func FuzzScanQuery(f *testing.F) {
	for _, s := range [][2]string{
		{"t1", ""}, {"t1", "prefix=b"}, {"t1", "prefix_b64=AP8="}, {"t1", "start_b64=+w"}, {"t1", "limit=2"}, {"t1", "limit=0"},
		{"t1", "limit=99999999999999999999"}, {"t1", "prefix=a&prefix_b64=YQ"}, {"t1", "start=" + strings.Repeat("s", 17)},
		{"t2", ""}, {"nope", ""}, {"", ""}, {"a/b", ""}, {"t1", "%zz"}, {"t1", "limit=-1"}, {"t1", "start_b64=%%%"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, id, q string) {
		fb := seeded()
		r := serveRaw(New(fb, fuzzOpts).Handler(), "GET", "/tasks/"+id+"/state", q, nil)
		checkAnswer(t, r)
		if n := fb.Mutations(); n != 0 {
			t.Fatalf("scan %q ?%s called mutating Backend methods %d times", id, q, n)
		}
		if fb.Calls("Scan") > 0 {
			o := fb.Last().Scan
			if fb.Last().Task != id || !ValidTaskID(id) {
				t.Fatalf("Backend.Scan got task %q from path id %q", fb.Last().Task, id)
			}
			if o.Limit < 2 || o.Limit > fuzzOpts.MaxScanLimit+1 || len(o.Prefix) > fuzzOpts.MaxKeyBytes || len(o.Start) > fuzzOpts.MaxKeyBytes {
				t.Fatalf("Backend.Scan got options %+v outside the limits", o)
			}
		}
		if r.status == 200 {
			var res api.ScanResult
			if err := json.Unmarshal(r.body, &res); err != nil || len(res.Items) > fuzzOpts.MaxScanLimit {
				t.Fatalf("scan body %s: %v, or more than %d items", r.body, err, fuzzOpts.MaxScanLimit)
			}
		}
	})
}

// FuzzTaskID sends arbitrary task IDs to every route that takes one. Only
// valid IDs may reach the Backend, and only unchanged.
func FuzzTaskID(f *testing.F) {
	for _, s := range []string{"t1", "t3", "", "a.b", "a b", "t1/x", "%41", strings.Repeat("a", 129), "\x00", "é"} {
		for route := range 5 {
			f.Add(s, uint8(route))
		}
	}
	routes := []struct{ method, suffix string }{
		{"POST", "/release"}, {"POST", "/commit"}, {"GET", "/state"}, {"GET", "/state/a"}, {"POST", "/get"},
	}
	f.Fuzz(func(t *testing.T, id string, route uint8) {
		rt := routes[int(route)%len(routes)]
		fb := seeded()
		r := serveRaw(New(fb, fuzzOpts).Handler(), rt.method, "/tasks/"+id+rt.suffix, "", []byte(`{}`))
		checkAnswer(t, r)
		calls := fb.Calls("Release") + fb.Calls("Commit") + fb.Calls("Get") + fb.Calls("Scan") + fb.Calls("GetMany")
		got := fb.Last().Task
		if calls > 0 && (!ValidTaskID(id) || got != id) {
			t.Fatalf("%s /tasks/%q%s reached the Backend with task %q", rt.method, id, rt.suffix, got)
		}
		if !ValidTaskID(id) && r.status != 400 && r.status != 404 && r.status != 405 {
			t.Fatalf("%s /tasks/%q%s = %d, want 400 or 404", rt.method, id, rt.suffix, r.status)
		}
	})
}

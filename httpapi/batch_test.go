package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

// binHeader sends a body in the binary form, and asks for one back.
var binHeader = http.Header{"Content-Type": {api.MediaBinary}, "Accept": {api.MediaBinary}}

func TestGetMany(t *testing.T) {
	tests := []struct {
		name   string
		target string // the task; "" is t1
		body   []byte
		hdr    http.Header
		opts   Options
		setup  func(f *httpapitest.Backend)
		status int
		code   string
		want   [][]byte // the values, for a 200
	}{
		{name: "json", body: []byte(`{"keys":["YQ==","eno=","AP8="]}`), status: 200,
			want: [][]byte{[]byte("1"), nil, []byte("bin")}},
		{name: "json asking binary", body: []byte(`{"keys":["YQ=="]}`), hdr: http.Header{"Accept": {api.MediaBinary}}, status: 200,
			want: [][]byte{[]byte("1")}},
		{name: "binary", body: api.AppendGetBinary(nil, [][]byte{[]byte("b"), []byte("zz"), []byte("x/y")}), hdr: binHeader, status: 200,
			want: [][]byte{[]byte("2"), nil, []byte("slash")}},
		{name: "binary asking json", body: api.AppendGetBinary(nil, [][]byte{[]byte("b")}), hdr: http.Header{"Content-Type": {api.MediaBinary}}, status: 200,
			want: [][]byte{[]byte("2")}},
		{name: "no keys", body: []byte(`{"keys":[]}`), status: 200, want: [][]byte{}},
		{name: "the same key twice", body: []byte(`{"keys":["YQ==","YQ=="]}`), status: 200, want: [][]byte{[]byte("1"), []byte("1")}},
		{name: "empty value is not absent", body: []byte(`{"keys":["ZQ=="]}`), setup: func(f *httpapitest.Backend) {
			f.SetValue("t1", "e", "")
		}, status: 200, want: [][]byte{{}}},
		{name: "learner", body: []byte(`{"keys":["YQ=="]}`), target: "t2", status: 409, code: api.CodeNotOwner},
		{name: "unknown task", body: []byte(`{"keys":["YQ=="]}`), target: "nope", status: 404, code: api.CodeUnknownTask},
		{name: "invalid task ID", body: []byte(`{"keys":["YQ=="]}`), target: "a.b", status: 400, code: api.CodeInvalid},
		{name: "empty key", body: []byte(`{"keys":["YQ==",""]}`), status: 400, code: api.CodeInvalid},
		{name: "empty key binary", body: api.AppendGetBinary(nil, [][]byte{{}}), hdr: binHeader, status: 400, code: api.CodeInvalid},
		{name: "key too long", body: []byte(`{"keys":["YWFhYWFhYWFh"]}`), opts: Options{MaxKeyBytes: 8}, status: 413, code: api.CodeTooLarge},
		{name: "too many keys", body: []byte(`{"keys":["YQ==","Yg==","YQ=="]}`), opts: Options{MaxGetKeys: 2}, status: 413, code: api.CodeTooLarge},
		{name: "values over the bound", body: []byte(`{"keys":["YQ==","Yg=="]}`), opts: Options{MaxGetBytes: 1}, status: 413, code: api.CodeTooLarge},
		{name: "body over the limit", body: []byte(`{"keys":["YQ==","Yg=="]}`), opts: Options{MaxBodyBytes: 8}, status: 413, code: api.CodeTooLarge},
		{name: "unknown field", body: []byte(`{"key":["YQ=="]}`), status: 400, code: api.CodeInvalid},
		{name: "field twice", body: []byte(`{"keys":[],"keys":["YQ=="]}`), status: 400, code: api.CodeInvalid},
		{name: "loose base64", body: []byte(`{"keys":["YQ"]}`), status: 400, code: api.CodeInvalid},
		{name: "not an object", body: []byte(`["YQ=="]`), status: 400, code: api.CodeInvalid},
		{name: "null body", body: []byte(` null `), status: 400, code: api.CodeInvalid},
		{name: "keys missing", body: []byte(`{}`), status: 400, code: api.CodeInvalid},
		{name: "null keys", body: []byte(`{"keys":null}`), status: 400, code: api.CodeInvalid},
		{name: "null key", body: []byte(`{"keys":[null]}`), status: 400, code: api.CodeInvalid},
		{name: "binary truncated", body: api.AppendGetBinary(nil, [][]byte{[]byte("abc")})[:6], hdr: binHeader, status: 400, code: api.CodeInvalid},
		{name: "binary trailing bytes", body: append(api.AppendGetBinary(nil, [][]byte{[]byte("a")}), 0), hdr: binHeader, status: 400, code: api.CodeInvalid},
		{name: "text/plain", body: []byte(`{"keys":["YQ=="]}`), hdr: http.Header{"Content-Type": {"text/plain"}}, status: 415, code: api.CodeUnsupportedMediaType},
		{name: "binary with a parameter", body: api.AppendGetBinary(nil, nil), hdr: http.Header{"Content-Type": {api.MediaBinary + "; v=2"}}, status: 415, code: api.CodeUnsupportedMediaType},
		{name: "backend fails", body: []byte(`{"keys":["YQ=="]}`), setup: func(f *httpapitest.Backend) { f.Fail("GetMany", errors.New("pebble broke")) },
			status: 500, code: api.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := seeded()
			if tt.setup != nil {
				tt.setup(f)
			}
			task := "t1"
			if tt.target != "" {
				task = tt.target
			}
			r := serve(New(f, tt.opts).Handler(), "POST", "/tasks/"+task+"/get", tt.body, tt.hdr)
			if r.status != tt.status {
				t.Fatalf("POST /tasks/%s/get %q = %d %s, want %d", task, tt.body, r.status, r.body, tt.status)
			}
			if f.Mutations() != 0 {
				t.Errorf("a batch get called mutating Backend methods")
			}
			if tt.status != 200 {
				if e := r.errBody(t); e.Code != tt.code {
					t.Errorf("code = %q (%s), want %q", e.Code, e.Message, tt.code)
				}
				if tt.status == 400 || tt.status == 413 && tt.opts.MaxGetBytes == 0 || tt.status == 415 {
					if n := f.Calls("GetMany"); n != 0 {
						t.Errorf("a refused batch get reached the Backend (%d calls)", n)
					}
				}
				return
			}
			var got [][]byte
			switch ct := r.header.Get("Content-Type"); ct {
			case api.MediaBinary:
				var err error
				if got, err = api.DecodeValuesBinary(r.body); err != nil {
					t.Fatalf("binary answer %x: %v", r.body, err)
				}
			case api.MediaJSON:
				var res api.GetResult
				mustJSON(t, r.body, &res)
				got = res.Values
				if res.Values == nil || !bytes.HasPrefix(r.body, []byte(`{"values":[`)) {
					t.Errorf("body %s has no values array", r.body)
				}
			default:
				t.Fatalf("Content-Type %q", ct)
			}
			if wantBin := wantsBinary(&http.Request{Header: tt.hdr}); (r.header.Get("Content-Type") == api.MediaBinary) != wantBin {
				t.Errorf("answered %s to Accept %q", r.header.Get("Content-Type"), tt.hdr.Get("Accept"))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("values = %q, want %q", got, tt.want)
			}
			for i := range got {
				if !bytes.Equal(got[i], tt.want[i]) || (got[i] == nil) != (tt.want[i] == nil) {
					t.Errorf("values[%d] = %q, want %q (absent and empty differ)", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestGetManyJSONMatchesEncodingJSON: the hand-written answer is what
// encoding/json would write.
func TestGetManyJSONMatchesEncodingJSON(t *testing.T) {
	for _, vals := range [][][]byte{nil, {}, {nil}, {{}}, {[]byte("a"), nil, {0, 0xff}, []byte("<&>")}} {
		want, _ := json.Marshal(api.GetResult{Values: append([][]byte{}, vals...)})
		if got := appendGetResultJSON(nil, vals); string(got) != string(want)+"\n" {
			t.Errorf("appendGetResultJSON(%q) = %s, want %s", vals, got, want)
		}
	}
	for _, res := range []api.ScanResult{
		{Items: []api.KV{}},
		{Items: []api.KV{{Key: []byte("a"), Value: []byte{}}, {Key: []byte{0}, Value: []byte("v")}}, Next: []byte("b")},
	} {
		want, _ := json.Marshal(res)
		if got := appendScanResultJSON(nil, res); string(got) != string(want)+"\n" {
			t.Errorf("appendScanResultJSON(%+v) = %s, want %s", res, got, want)
		}
	}
}

func TestScanBinary(t *testing.T) {
	f := seeded()
	h := New(f, Options{}).Handler()
	r := serve(h, "GET", "/tasks/t1/state?limit=2", nil, http.Header{"Accept": {api.MediaBinary}})
	if r.status != 200 || r.header.Get("Content-Type") != api.MediaBinary {
		t.Fatalf("binary scan = %d %s %q", r.status, r.header.Get("Content-Type"), r.body)
	}
	res, err := api.DecodeScanBinary(r.body)
	if err != nil {
		t.Fatal(err)
	}
	js := serve(h, "GET", "/tasks/t1/state?limit=2", nil, nil)
	var want api.ScanResult
	mustJSON(t, js.body, &want)
	if !reflect.DeepEqual(res, want) {
		t.Errorf("binary scan = %+v, JSON scan = %+v", res, want)
	}
	if string(res.Next) != "b" || len(res.Items) != 2 {
		t.Errorf("binary scan = %+v, want 2 items and next b", res)
	}
}

func TestWantsBinary(t *testing.T) {
	tests := []struct {
		accept string
		want   bool
	}{
		{"", false},
		{"*/*", false},
		{api.MediaJSON, false},
		{api.MediaBinary, true},
		{api.MediaBinary + ", */*", true},
		{"*/*, " + api.MediaBinary, true},
		{api.MediaJSON + ", " + api.MediaBinary, false},
		{api.MediaJSON + ";q=0.5, " + api.MediaBinary, true},
		{api.MediaBinary + ";q=0.5, " + api.MediaJSON, false},
		{api.MediaBinary + ";q=0", false},
		{"application/*;q=0.2, " + api.MediaBinary + ";q=0.9", true},
		{"text/html", false},
		{"garbage;;;", false},
	}
	for _, tt := range tests {
		r := &http.Request{Header: http.Header{"Accept": {tt.accept}}}
		if got := wantsBinary(r); got != tt.want {
			t.Errorf("wantsBinary(Accept: %q) = %v, want %v", tt.accept, got, tt.want)
		}
	}
}

// TestCommitBinary: a binary commit reaches the Backend as its JSON twin
// does, and refuses what the JSON refuses, with the same codes.
func TestCommitBinary(t *testing.T) {
	ok := api.CommitRequest{Puts: []api.KV{{Key: []byte{0, 0xff}, Value: []byte{1}}}, Deletes: [][]byte{[]byte("a")}, Checkpoint: []byte{0, 7}, Epoch: 3}
	f := seeded()
	r := serve(New(f, Options{}).Handler(), "POST", "/tasks/t1/commit", api.AppendCommitBinary(nil, ok), http.Header{"Content-Type": {api.MediaBinary}})
	if r.status != 200 || r.header.Get("Content-Type") != api.MediaJSON {
		t.Fatalf("binary commit = %d %s", r.status, r.body)
	}
	got := f.Last().Commit
	if !reflect.DeepEqual(got, ok) {
		t.Errorf("Backend.Commit got %+v, want %+v", got, ok)
	}

	long := strings.Repeat("k", 9)
	tests := []struct {
		name   string
		body   []byte
		status int
		code   string
	}{
		{"empty key", api.AppendCommitBinary(nil, api.CommitRequest{Puts: []api.KV{{Key: []byte{}, Value: []byte("v")}}}), 400, api.CodeInvalid},
		{"key twice", api.AppendCommitBinary(nil, api.CommitRequest{Puts: []api.KV{{Key: []byte("a")}}, Deletes: [][]byte{[]byte("a")}}), 400, api.CodeInvalid},
		{"key too long", api.AppendCommitBinary(nil, api.CommitRequest{Deletes: [][]byte{[]byte(long)}}), 413, api.CodeTooLarge},
		{"value too long", api.AppendCommitBinary(nil, api.CommitRequest{Puts: []api.KV{{Key: []byte("a"), Value: make([]byte, 17)}}}), 413, api.CodeTooLarge},
		{"checkpoint too long", api.AppendCommitBinary(nil, api.CommitRequest{Checkpoint: make([]byte, 17)}), 413, api.CodeTooLarge},
		{"body too long", api.AppendCommitBinary(nil, api.CommitRequest{Puts: []api.KV{{Key: []byte("a"), Value: make([]byte, 16)}, {Key: []byte("b"), Value: make([]byte, 16)}}}), 413, api.CodeTooLarge},
		{"empty body", nil, 400, api.CodeInvalid},
		{"truncated", api.AppendCommitBinary(nil, ok)[:20], 400, api.CodeInvalid},
		{"trailing byte", append(api.AppendCommitBinary(nil, ok), 0), 400, api.CodeInvalid},
		{"a count the body cannot hold", append(api.AppendCommitBinary(nil, api.CommitRequest{})[:12], 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0), 400, api.CodeInvalid},
		{"JSON sent as binary", []byte(`{"epoch":3}`), 400, api.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := seeded()
			r := serve(New(f, Options{MaxKeyBytes: 8, MaxValueBytes: 16, MaxBodyBytes: 60}).Handler(), "POST", "/tasks/t1/commit", tt.body,
				http.Header{"Content-Type": {api.MediaBinary}})
			if r.status != tt.status {
				t.Fatalf("binary commit %x = %d %s, want %d", tt.body, r.status, r.body, tt.status)
			}
			if e := r.errBody(t); e.Code != tt.code {
				t.Errorf("code %q (%s), want %q", e.Code, e.Message, tt.code)
			}
			if f.Calls("Commit") != 0 {
				t.Errorf("a refused binary commit reached Backend.Commit")
			}
		})
	}
}

// trickle is a body that sends one byte and then fails, as a slow body
// cut off does; it records the largest buffer it was offered.
type trickle struct {
	sent    bool
	largest int
}

func (r *trickle) Read(p []byte) (int, error) {
	r.largest = max(r.largest, len(p))
	if r.sent {
		return 0, errors.New("connection closed")
	}
	r.sent = true
	p[0] = '{'
	return 1, nil
}

// A body declared large but trickling in is read into a small buffer:
// a flood of such bodies, each cut off after its first byte, costs the
// agent small allocations, not a large buffer each (it used to take 64
// KiB per body, thousands a second, and the garbage collector took a
// third of the agent's CPU).
func TestReadAllTakesASmallBufferForATrickle(t *testing.T) {
	r := &trickle{}
	if _, err := readAll(r, 1_000_000, 1<<20); err == nil {
		t.Fatal("readAll of a body cut off = nil error, want the read's")
	}
	if r.largest > readAllFirst {
		t.Errorf("readAll offered a buffer of %d bytes to a body that sent 1, want at most %d", r.largest, readAllFirst)
	}
}

// readAll reads a body whole whatever its size and declared length, a
// body larger than its first buffer included.
func TestReadAll(t *testing.T) {
	const max = 4 * readAllSecond
	for _, size := range []int{1, 100, readAllFirst - 1, readAllFirst, readAllFirst + 1, 3 * readAllFirst,
		readAllSecond - 1, readAllSecond, readAllSecond + 1, 3 * readAllSecond, max} {
		body := bytes.Repeat([]byte("x"), size)
		for _, declared := range []int64{int64(size), int64(size) + 7, -1, max + 1} {
			got, err := readAll(bytes.NewReader(body), declared, max)
			if err != nil || !bytes.Equal(got, body) {
				t.Errorf("readAll(%d bytes, declared %d) = %d bytes, %v; want the body", size, declared, len(got), err)
			}
		}
		// More than declared is read on, for the caller to refuse.
		if got, err := readAll(bytes.NewReader(body), int64(size-1), max); err != nil || !bytes.Equal(got, body) {
			t.Errorf("readAll(%d bytes, declared %d) = %d bytes, %v; want all of it", size, size-1, len(got), err)
		}
	}
}

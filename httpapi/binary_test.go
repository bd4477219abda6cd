package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/handoffhq/handoff/api"
)

func binSeeds() [][]byte {
	return [][]byte{
		api.AppendCommitBinary(nil, api.CommitRequest{Puts: []api.KV{{Key: []byte("a"), Value: []byte("1")}}, Deletes: [][]byte{[]byte("b")}, Checkpoint: []byte{7}, Epoch: 3}),
		api.AppendCommitBinary(nil, api.CommitRequest{}),
		api.AppendCommitBinary(nil, api.CommitRequest{Puts: []api.KV{{Key: []byte("a")}, {Key: []byte("a")}}}),
		api.AppendCommitBinary(nil, api.CommitRequest{Deletes: [][]byte{{}}}),
		api.AppendCommitBinary(nil, api.CommitRequest{Puts: []api.KV{{Key: bytes.Repeat([]byte("k"), 17), Value: []byte("v")}}}),
		api.AppendCommitBinary(nil, api.CommitRequest{Puts: []api.KV{{Key: []byte("k"), Value: make([]byte, 65)}}}),
		{}, {0}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		append(api.AppendCommitBinary(nil, api.CommitRequest{}), 0),
		api.AppendCommitBinary(nil, api.CommitRequest{Epoch: 3}),
		api.AppendCommitBinary(nil, api.CommitRequest{Checkpoint: []byte{7}, Epoch: 3}),
		[]byte(`{"epoch":3}`),
	}
}

// FuzzCommitBinaryBody is FuzzCommitBody for the binary form: a refused
// body never reaches the Backend, and an accepted one reaches it as the
// body says, within the limits, and is the one encoding of what it says.
func FuzzCommitBinaryBody(f *testing.F) {
	for _, s := range binSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fb := seeded()
		h := New(fb, fuzzOpts).Handler()
		r := serve(h, "POST", "/tasks/t1/commit", body, http.Header{"Content-Type": {api.MediaBinary}})
		checkAnswer(t, r)
		calls := fb.Calls("Commit")
		switch {
		case r.status == 400 || r.status == 413:
			if calls != 0 {
				t.Fatalf("refused body %x (%d) reached Backend.Commit", body, r.status)
			}
			return
		case calls != 1:
			t.Fatalf("body %x answered %d without exactly one Backend.Commit (got %d)", body, r.status, calls)
		}
		got := fb.Last().Commit
		if enc := api.AppendCommitBinary(nil, got); !bytes.Equal(enc, body) {
			t.Fatalf("accepted body %x, which is not the encoding %x of what reached the Backend", body, enc)
		}
		checkWithinLimits(t, got)
		checkNotEmpty(t, got)
	})
}

// FuzzGetBody sends arbitrary batch get bodies, JSON or binary: refused
// ones never reach the Backend; accepted ones reach it with the keys the
// body names, each within the limits, and answer one value per key.
func FuzzGetBody(f *testing.F) {
	for _, s := range []string{`{"keys":["YQ=="]}`, `{"keys":[]}`, `{}`, `{"keys":null}`, `{"keys":[""]}`, `{"keys":["YQ"]}`,
		`{"Keys":["YQ=="]}`, `{"keys":["YQ=="],"keys":[]}`, `{"keys":"YQ=="}`, `{"keys":[null]}`, `[]`, ``, `{"keys":["\u0059Q=="]}`} {
		f.Add([]byte(s), false)
	}
	for _, s := range [][][]byte{{[]byte("a")}, {}, {{}}, {[]byte("a"), []byte("zz")}, {bytes.Repeat([]byte("k"), 17)}} {
		f.Add(api.AppendGetBinary(nil, s), true)
	}
	f.Add([]byte{0, 0, 0, 9, 0, 0, 0, 0}, true)
	f.Fuzz(func(t *testing.T, body []byte, binary bool) {
		fb := seeded()
		hdr := http.Header{}
		if binary {
			hdr = binHeader
		}
		r := serve(New(fb, fuzzOpts).Handler(), "POST", "/tasks/t1/get", body, hdr)
		checkAnswer(t, r)
		if fb.Mutations() != 0 {
			t.Fatalf("a batch get called mutating Backend methods")
		}
		calls := fb.Calls("GetMany")
		if r.status == 400 || r.status == 413 {
			if calls != 0 {
				t.Fatalf("refused body %q (%d) reached Backend.GetMany", body, r.status)
			}
			return
		}
		if r.status != 200 || calls != 1 {
			t.Fatalf("body %q answered %d with %d Backend.GetMany calls", body, r.status, calls)
		}
		var want [][]byte
		if binary {
			var err error
			if want, err = api.DecodeGetBinary(body); err != nil {
				t.Fatalf("accepted binary body %x that does not decode: %v", body, err)
			}
		} else {
			var req api.GetRequest
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatalf("accepted body %q that encoding/json refuses: %v", body, err)
			}
			if req.Keys == nil {
				t.Fatalf(`accepted body %q, which is not {"keys": [...]}`, body)
			}
			want = req.Keys
		}
		got := fb.Last().GetMany
		if len(got) != len(want) || len(got) > fuzzOpts.MaxGetKeys {
			t.Fatalf("Backend.GetMany got %d keys, the body has %d", len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) || len(got[i]) == 0 || len(got[i]) > fuzzOpts.MaxKeyBytes {
				t.Fatalf("key %d: Backend got %q, body says %q", i, got[i], want[i])
			}
		}
		var vals [][]byte
		if binary {
			vals, _ = api.DecodeValuesBinary(r.body)
		} else {
			var res api.GetResult
			mustJSON(t, r.body, &res)
			vals = res.Values
		}
		if len(vals) != len(want) {
			t.Fatalf("answered %d values for %d keys", len(vals), len(want))
		}
	})
}

// FuzzFastJSON holds the fast decoder of commit and batch get bodies to the
// general strict one: whatever the fast one accepts, the strict one
// accepts too, with the same result.
func FuzzFastJSON(f *testing.F) {
	for _, s := range []string{
		`{"puts":[{"key":"YQ==","value":"MQ=="}],"deletes":["Yg=="],"checkpoint":"AAAAAAAAAAc=","epoch":3}`,
		`{}`, ` { "epoch" : 0 } `, `{"epoch":01}`, `{"epoch":18446744073709551615}`, `{"epoch":18446744073709551616}`,
		`{"epoch":3.0}`, `{"epoch":3e0}`, `{"epoch":-3}`, `{"puts":[]}`, `{"puts":[{}]}`, `{"deletes":[]}`, `{"checkpoint":""}`,
		`{"puts":[{"key":"YQ==","key":"YQ=="}]}`, `{"keys":["YQ==","Yg=="]}`, `{"keys":[]}`, `{"epoch":3}x`, `{"epoch":3,}`,
		`{"deletes":["YR=="]}`, `{"deletes":["YQ=="`, "{\"deletes\":[\"YQ=\n=\"]}", `{"puts":[{"key":"YQ==","value":"YQ=="},]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if fast, err := fastCommit(body); err == nil {
			var strict api.CommitRequest
			if err := decodeStrict(body, &strict); err != nil {
				t.Fatalf("fast decoder accepted commit %q, the strict one refuses it: %v", body, err)
			}
			if !reflect.DeepEqual(fast, strict) {
				t.Fatalf("commit %q: fast decoder %+v, strict one %+v", body, fast, strict)
			}
		}
		if fast, err := fastGet(body); err == nil {
			var strict api.GetRequest
			if err := decodeStrict(body, &strict); err != nil {
				t.Fatalf("fast decoder accepted get %q, the strict one refuses it: %v", body, err)
			}
			if !reflect.DeepEqual(fast, strict) {
				t.Fatalf("get %q: fast decoder %+v, strict one %+v", body, fast, strict)
			}
		}
	})
}

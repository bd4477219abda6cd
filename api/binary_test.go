package api

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The binary form has one encoding per document: every accepted body is
// exactly what the encoder writes for what it decoded to.

func TestBinaryRoundTrip(t *testing.T) {
	commits := []CommitRequest{
		{},
		{Epoch: 1<<64 - 1, Checkpoint: []byte{0}},
		{Puts: []KV{{Key: []byte("a"), Value: []byte{}}, {Key: []byte{0, 0xff}, Value: bytes.Repeat([]byte("v"), 300)}}, Deletes: [][]byte{[]byte("d")}, Epoch: 3},
	}
	for _, c := range commits {
		b := AppendCommitBinary(nil, c)
		got, err := DecodeCommitBinary(b)
		if err != nil {
			t.Fatalf("DecodeCommitBinary(AppendCommitBinary(%+v)): %v", c, err)
		}
		if !sameCommit(got, c) {
			t.Errorf("round trip of %+v gave %+v", c, got)
		}
	}
	for _, vals := range [][][]byte{{}, {nil}, {{}}, {[]byte("a"), nil, {}, {0xff, 0xff, 0xff, 0xff}}} {
		got, err := DecodeValuesBinary(AppendValuesBinary(nil, vals))
		if err != nil || !reflect.DeepEqual(normalizeValues(got), normalizeValues(vals)) {
			t.Errorf("values %q round trip = %q, %v", vals, got, err)
		}
	}
	res := ScanResult{Items: []KV{{Key: []byte("k"), Value: []byte{}}}, Next: []byte("l")}
	if got, err := DecodeScanBinary(AppendScanBinary(nil, res)); err != nil || !reflect.DeepEqual(got, res) {
		t.Errorf("scan round trip = %+v, %v; want %+v", got, err, res)
	}
	keys := [][]byte{[]byte("a"), {0}}
	if got, err := DecodeGetBinary(AppendGetBinary(nil, keys)); err != nil || !reflect.DeepEqual(got, keys) {
		t.Errorf("get round trip = %q, %v", got, err)
	}
}

// TestBinaryLayout pins the bytes of the documented example in docs/api.md.
func TestBinaryLayout(t *testing.T) {
	got := AppendCommitBinary(nil, CommitRequest{Epoch: 3, Checkpoint: []byte{7},
		Puts: []KV{{Key: []byte("a"), Value: []byte("1")}}, Deletes: [][]byte{[]byte("b")}})
	want := []byte{
		0, 0, 0, 0, 0, 0, 0, 3, // epoch 3
		0, 0, 0, 1, 7, // checkpoint: 1 byte, 0x07
		0, 0, 0, 1, // 1 put
		0, 0, 0, 1, 'a', 0, 0, 0, 1, '1', // key "a", value "1"
		0, 0, 0, 1, // 1 delete
		0, 0, 0, 1, 'b', // key "b"
	}
	if !bytes.Equal(got, want) {
		t.Errorf("commit = % x\nwant     % x", got, want)
	}
	if got, want := AppendValuesBinary(nil, [][]byte{[]byte("1"), nil}), []byte{0, 0, 0, 2, 0, 0, 0, 1, '1', 0xff, 0xff, 0xff, 0xff}; !bytes.Equal(got, want) {
		t.Errorf("values = % x, want % x", got, want)
	}
}

func TestBinaryMalformed(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "epoch"},
		{"epoch cut", []byte{0, 0, 0}, "epoch"},
		{"checkpoint length cut", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0}, "checkpoint"},
		{"checkpoint longer than the body", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 1}, "checkpoint"},
		{"puts the body cannot hold", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0}, "puts"},
		{"value cut", AppendCommitBinary(nil, CommitRequest{Puts: []KV{{Key: []byte("a"), Value: []byte("vv")}}})[:25], "puts[0].value"},
		{"no deletes count", AppendCommitBinary(nil, CommitRequest{})[:16], "deletes"},
		{"trailing", append(AppendCommitBinary(nil, CommitRequest{}), 1, 2), "2 bytes follow"},
	}
	for _, tt := range tests {
		_, err := DecodeCommitBinary(tt.b)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: DecodeCommitBinary(% x) = %v, want ErrMalformed naming %q", tt.name, tt.b, err, tt.want)
		}
	}
}

// sameCommit compares commits as the Backend sees them: an empty list or
// checkpoint is the same as none.
func sameCommit(a, b CommitRequest) bool {
	norm := func(c CommitRequest) CommitRequest {
		if len(c.Puts) == 0 {
			c.Puts = nil
		}
		if len(c.Deletes) == 0 {
			c.Deletes = nil
		}
		if len(c.Checkpoint) == 0 {
			c.Checkpoint = nil
		}
		for i := range c.Puts {
			if c.Puts[i].Value == nil {
				c.Puts[i].Value = []byte{}
			}
		}
		return c
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// FuzzBinaryAnswers feeds the client's decoders of the binary answers:
// they never panic, and what they accept is the one encoding of what they
// decoded.
func FuzzBinaryAnswers(f *testing.F) {
	f.Add(AppendValuesBinary(nil, [][]byte{[]byte("a"), nil, {}}))
	f.Add(AppendScanBinary(nil, ScanResult{Items: []KV{{Key: []byte("k"), Value: []byte("v")}}, Next: []byte("l")}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if vals, err := DecodeValuesBinary(b); err == nil {
			if enc := AppendValuesBinary(nil, vals); !bytes.Equal(enc, b) {
				t.Fatalf("values %x decoded to %q, which encodes as %x", b, vals, enc)
			}
		}
		if res, err := DecodeScanBinary(b); err == nil {
			if enc := AppendScanBinary(nil, res); !bytes.Equal(enc, b) {
				t.Fatalf("scan %x decoded to %+v, which encodes as %x", b, res, enc)
			}
		}
	})
}

// normalizeValues makes empty values comparable while keeping absent ones
// (nil) apart.
func normalizeValues(vs [][]byte) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		if v == nil {
			out[i] = "<absent>"
		} else {
			out[i] = "=" + string(v)
		}
	}
	return out
}

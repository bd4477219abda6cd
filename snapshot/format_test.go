package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// sliceSource is a Source over records in memory.
type sliceSource struct {
	kvs  [][2][]byte
	i    int
	fail error // returned by Err once the records run out, if set
}

func (s *sliceSource) Next() bool {
	if s.i >= len(s.kvs) {
		return false
	}
	s.i++
	return true
}
func (s *sliceSource) Key() []byte   { return s.kvs[s.i-1][0] }
func (s *sliceSource) Value() []byte { return s.kvs[s.i-1][1] }
func (s *sliceSource) Err() error {
	if s.i >= len(s.kvs) {
		return s.fail
	}
	return nil
}

func records(n int) [][2][]byte {
	out := make([][2][]byte, n)
	for i := range out {
		out[i] = [2][]byte{fmt.Appendf(nil, "key-%05d", i), bytes.Repeat([]byte{byte(i)}, i%300)}
	}
	return out
}

func encode(t testing.TB, h Header, kvs [][2][]byte) []byte {
	t.Helper()
	b, err := io.ReadAll(NewEncoder(h, &sliceSource{kvs: kvs}))
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return b
}

// decode reads a whole snapshot; the error is the first one met.
func decode(b []byte) (Header, [][2][]byte, error) {
	d, err := NewDecoder(bytes.NewReader(b))
	if err != nil {
		return Header{}, nil, err
	}
	var kvs [][2][]byte
	for d.Next() {
		kvs = append(kvs, [2][]byte{bytes.Clone(d.Key()), bytes.Clone(d.Value())})
	}
	return d.Header(), kvs, d.Err()
}

func testHeader(keys int) Header {
	return Header{Task: "orders-7", Seq: 12345, Epoch: 6, Checkpoint: []byte("offset=99"), Keys: uint64(keys), Created: time.Unix(1700000000, 42)}
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 7, 3000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			h, kvs := testHeader(n), records(n)
			b := encode(t, h, kvs)
			gh, gkvs, err := decode(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if gh.Task != h.Task || gh.Seq != h.Seq || gh.Epoch != h.Epoch || !bytes.Equal(gh.Checkpoint, h.Checkpoint) ||
				gh.Keys != h.Keys || !gh.Created.Equal(h.Created) {
				t.Errorf("header = %+v, want %+v", gh, h)
			}
			if len(gkvs) != n {
				t.Fatalf("%d records, want %d", len(gkvs), n)
			}
			for i := range kvs {
				if !bytes.Equal(gkvs[i][0], kvs[i][0]) || !bytes.Equal(gkvs[i][1], kvs[i][1]) {
					t.Fatalf("record %d = %q, want %q", i, gkvs[i], kvs[i])
				}
			}
		})
	}
}

// TestEveryCorruptionIsCaught flips each byte, one at a time, and cuts the
// snapshot at every length: decoding must fail every time.
func TestEveryCorruptionIsCaught(t *testing.T) {
	b := encode(t, testHeader(20), records(20))
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x41
		if _, _, err := decode(c); err == nil {
			t.Fatalf("byte %d of %d flipped: decoded without error", i, len(b))
		} else if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownVersion) {
			t.Fatalf("byte %d flipped: error %v wraps neither ErrCorrupt nor ErrUnknownVersion", i, err)
		}
	}
	for n := range len(b) {
		if _, _, err := decode(b[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("cut to %d of %d bytes: error %v, want ErrCorrupt", n, len(b), err)
		}
	}
	if _, _, err := decode(append(bytes.Clone(b), 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("trailing byte: error %v, want ErrCorrupt", err)
	}
}

func TestUnknownVersion(t *testing.T) {
	b := encode(t, testHeader(1), records(1))
	b[len(magic)] = Version + 1
	if _, err := NewDecoder(bytes.NewReader(b)); !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("NewDecoder of version %d = %v, want ErrUnknownVersion", Version+1, err)
	}
}

func TestEncoderChecksTheCount(t *testing.T) {
	tests := []struct {
		name   string
		header int
		have   int
		fail   error
	}{
		{"fewer keys than the header", 5, 4, nil},
		{"more keys than the header", 5, 6, nil},
		{"source error", 5, 3, errors.New("disk on fire")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := io.ReadAll(NewEncoder(testHeader(tc.header), &sliceSource{kvs: records(tc.have), fail: tc.fail}))
			if err == nil {
				t.Fatal("encode succeeded, want an error")
			}
			if tc.fail != nil && !errors.Is(err, tc.fail) {
				t.Errorf("error %v does not wrap the source's", err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(encode(f, testHeader(3), records(3)))
	f.Add(encode(f, testHeader(0), nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, kvs, err := decode(b)
		if err != nil {
			return
		}
		// Whatever decodes whole re-encodes to the same bytes.
		again := encode(t, h, kvs)
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded %d records, re-encoded differently", len(kvs))
		}
	})
}

package api

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// MediaBinary is the media type of the API's binary bodies: a commit, a
// batch get and its answer, and a scan's answer, with keys and values as
// length-prefixed bytes instead of base64 in JSON. A request sends it as
// Content-Type; an answer is binary when the request's Accept names it.
// The layout is version 1 of the format; an incompatible one would get
// another media type. docs/api.md describes it byte by byte.
//
// Every integer is big-endian and of fixed width: a count or a length is 4
// bytes (uint32), the epoch 8 (uint64).
//
//	commit request:  epoch u64 · checkpoint (len u32, bytes) ·
//	                 puts u32 · {key len u32, key, value len u32, value}… ·
//	                 deletes u32 · {key len u32, key}…
//	get request:     keys u32 · {key len u32, key}…
//	get answer:      values u32 · {len u32, bytes}…  (len 0xFFFFFFFF: absent, no bytes)
//	scan answer:     items u32 · {key len u32, key, value len u32, value}… ·
//	                 next (len u32, bytes; len 0: no next page)
//
// Nothing may follow the last field.
const MediaBinary = "application/vnd.handoff.binary"

// MediaJSON is the media type of the API's JSON bodies, the default.
const MediaJSON = "application/json"

// absentLen is the length that marks an absent value in a get answer.
const absentLen = math.MaxUint32

// ErrMalformed is wrapped by the errors of the binary decoders: the body
// is not a well-formed binary body of its kind (the API answers 400).
var ErrMalformed = errors.New("malformed binary body")

func appendU32(dst []byte, n int) []byte { return binary.BigEndian.AppendUint32(dst, uint32(n)) }

func appendBytes32(dst, b []byte) []byte { return append(appendU32(dst, len(b)), b...) }

// AppendCommitBinary appends the binary form of req to dst.
func AppendCommitBinary(dst []byte, req CommitRequest) []byte {
	size := 8 + 4 + len(req.Checkpoint) + 4 + 4
	for _, kv := range req.Puts {
		size += 8 + len(kv.Key) + len(kv.Value)
	}
	for _, k := range req.Deletes {
		size += 4 + len(k)
	}
	if cap(dst)-len(dst) < size {
		dst = append(make([]byte, 0, len(dst)+size), dst...)
	}
	dst = binary.BigEndian.AppendUint64(dst, req.Epoch)
	dst = appendBytes32(dst, req.Checkpoint)
	dst = appendU32(dst, len(req.Puts))
	for _, kv := range req.Puts {
		dst = appendBytes32(appendBytes32(dst, kv.Key), kv.Value)
	}
	dst = appendU32(dst, len(req.Deletes))
	for _, k := range req.Deletes {
		dst = appendBytes32(dst, k)
	}
	return dst
}

// AppendGetBinary appends the binary form of a batch get of keys to dst.
func AppendGetBinary(dst []byte, keys [][]byte) []byte {
	dst = appendU32(dst, len(keys))
	for _, k := range keys {
		dst = appendBytes32(dst, k)
	}
	return dst
}

// AppendValuesBinary appends the binary form of a batch get's answer to
// dst: a nil value is absent, an empty one present.
func AppendValuesBinary(dst []byte, values [][]byte) []byte {
	size := 4
	for _, v := range values {
		size += 4 + len(v)
	}
	if cap(dst)-len(dst) < size {
		dst = append(make([]byte, 0, len(dst)+size), dst...)
	}
	dst = appendU32(dst, len(values))
	for _, v := range values {
		if v == nil {
			dst = binary.BigEndian.AppendUint32(dst, absentLen)
			continue
		}
		dst = appendBytes32(dst, v)
	}
	return dst
}

// AppendScanBinary appends the binary form of a scan's answer to dst.
func AppendScanBinary(dst []byte, res ScanResult) []byte {
	size := 8 + len(res.Next)
	for _, kv := range res.Items {
		size += 8 + len(kv.Key) + len(kv.Value)
	}
	if cap(dst)-len(dst) < size {
		dst = append(make([]byte, 0, len(dst)+size), dst...)
	}
	dst = appendU32(dst, len(res.Items))
	for _, kv := range res.Items {
		dst = appendBytes32(appendBytes32(dst, kv.Key), kv.Value)
	}
	return appendBytes32(dst, res.Next)
}

// binReader reads a binary body. Its errors say where the body went wrong
// (the field, as puts[2].key, and the offset); the slices it returns alias
// the body.
type binReader struct {
	b   []byte
	off int
}

// binField names a field of a binary body for an error: list[i].sub, or
// list alone when i < 0. It is turned into text only for an error.
type binField struct {
	list string
	i    int
	sub  string
}

func binName(name string) binField { return binField{list: name, i: -1} }

func (f binField) String() string {
	switch {
	case f.i < 0:
		return f.list
	case f.sub == "":
		return fmt.Sprintf("%s[%d]", f.list, f.i)
	}
	return fmt.Sprintf("%s[%d].%s", f.list, f.i, f.sub)
}

func (r *binReader) fail(what binField, format string, args ...any) error {
	return fmt.Errorf("%w: %s at byte %d: %s", ErrMalformed, what, r.off, fmt.Sprintf(format, args...))
}

func (r *binReader) left() int { return len(r.b) - r.off }

func (r *binReader) u32(what binField) (uint32, error) {
	if r.left() < 4 {
		return 0, r.fail(what, "the body ends %d bytes into its 4-byte length or count", r.left())
	}
	n := binary.BigEndian.Uint32(r.b[r.off:])
	r.off += 4
	return n, nil
}

func (r *binReader) u64(what binField) (uint64, error) {
	if r.left() < 8 {
		return 0, r.fail(what, "the body ends %d bytes into its 8 bytes", r.left())
	}
	n := binary.BigEndian.Uint64(r.b[r.off:])
	r.off += 8
	return n, nil
}

// bytes reads a length and that many bytes. Empty bytes are an empty,
// non-nil slice, as JSON's "" decodes.
func (r *binReader) bytes(what binField) ([]byte, error) {
	n, err := r.u32(what)
	if err != nil {
		return nil, err
	}
	if int64(n) > int64(r.left()) {
		r.off -= 4
		return nil, r.fail(what, "its length says %d bytes, the body holds %d more", n, r.left()-4)
	}
	b := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return b, nil
}

// count reads a count of entries of at least min bytes each, refusing one
// the rest of the body cannot hold before anything is allocated for it.
func (r *binReader) count(what binField, min int) (int, error) {
	n, err := r.u32(what)
	if err != nil {
		return 0, err
	}
	if int64(n)*int64(min) > int64(r.left()) {
		r.off -= 4
		return 0, r.fail(what, "it counts %d entries of at least %d bytes, the body holds %d more bytes", n, min, r.left()-4)
	}
	return int(n), nil
}

func (r *binReader) end() error {
	if r.left() != 0 {
		return r.fail(binName("the body"), "%d bytes follow its last field; nothing may", r.left())
	}
	return nil
}

// DecodeCommitBinary decodes a binary commit body. Keys, values and the
// checkpoint alias b. It checks the layout only; the API checks the
// limits and repeated keys as it does for JSON. An empty list is a
// non-nil empty slice, as in JSON; an empty checkpoint is nil (none).
func DecodeCommitBinary(b []byte) (CommitRequest, error) {
	r := binReader{b: b}
	var req CommitRequest
	var err error
	if req.Epoch, err = r.u64(binName("epoch")); err != nil {
		return CommitRequest{}, err
	}
	if req.Checkpoint, err = r.bytes(binName("checkpoint")); err != nil {
		return CommitRequest{}, err
	}
	if len(req.Checkpoint) == 0 {
		req.Checkpoint = nil
	}
	n, err := r.count(binName("puts"), 8)
	if err != nil {
		return CommitRequest{}, err
	}
	req.Puts = make([]KV, n)
	for i := range req.Puts {
		if req.Puts[i].Key, err = r.bytes(binField{"puts", i, "key"}); err != nil {
			return CommitRequest{}, err
		}
		if req.Puts[i].Value, err = r.bytes(binField{"puts", i, "value"}); err != nil {
			return CommitRequest{}, err
		}
	}
	if req.Deletes, err = r.keyList("deletes"); err != nil {
		return CommitRequest{}, err
	}
	return req, r.end()
}

// keyList reads a count and that many length-prefixed keys.
func (r *binReader) keyList(what string) ([][]byte, error) {
	n, err := r.count(binName(what), 4)
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, n)
	for i := range keys {
		if keys[i], err = r.bytes(binField{what, i, ""}); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// DecodeGetBinary decodes a binary batch get body: its keys, aliasing b.
func DecodeGetBinary(b []byte) ([][]byte, error) {
	r := binReader{b: b}
	keys, err := r.keyList("keys")
	if err != nil {
		return nil, err
	}
	return keys, r.end()
}

// DecodeValuesBinary decodes a binary batch get answer: nil for an absent
// value. The values alias b.
func DecodeValuesBinary(b []byte) ([][]byte, error) {
	r := binReader{b: b}
	n, err := r.count(binName("values"), 4)
	if err != nil {
		return nil, err
	}
	vals := make([][]byte, n)
	for i := range vals {
		what := binField{"values", i, ""}
		if r.left() >= 4 && binary.BigEndian.Uint32(r.b[r.off:]) == absentLen {
			r.off += 4
			continue
		}
		if vals[i], err = r.bytes(what); err != nil {
			return nil, err
		}
	}
	return vals, r.end()
}

// DecodeScanBinary decodes a binary scan answer; keys and values alias b.
func DecodeScanBinary(b []byte) (ScanResult, error) {
	r := binReader{b: b}
	n, err := r.count(binName("items"), 8)
	if err != nil {
		return ScanResult{}, err
	}
	res := ScanResult{Items: make([]KV, n)}
	for i := range res.Items {
		if res.Items[i].Key, err = r.bytes(binField{"items", i, "key"}); err != nil {
			return ScanResult{}, err
		}
		if res.Items[i].Value, err = r.bytes(binField{"items", i, "value"}); err != nil {
			return ScanResult{}, err
		}
	}
	if res.Next, err = r.bytes(binName("next")); err != nil {
		return ScanResult{}, err
	}
	if len(res.Next) == 0 {
		res.Next = nil
	}
	return res, r.end()
}

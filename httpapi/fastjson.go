package httpapi

import (
	"encoding/base64"
	"errors"

	"github.com/handoffhq/handoff/api"
)

// The bodies of the state routes are decoded in one pass by a decoder that
// knows their shape and reads only the form a client writes them in:
// field names without escapes, base64 strings without escapes, epochs as
// plain digits, no nulls. Anything else (an escape, a null, an unknown or
// repeated field, a wrong type, a syntax error) sends the body to the
// general strict decoder (decodeStrict), which either decodes it or says
// precisely what is wrong with it. The fast path therefore accepts only
// what decodeStrict accepts, with the same result; FuzzFastJSON checks
// that the two agree on every body.

// errSlowPath says that the fast decoder met something it does not handle.
var errSlowPath = errors.New("not in the fast decoder's subset")

var strictStd = base64.StdEncoding.Strict()

// fastDec reads one JSON body. arena holds the decoded bytes of every
// base64 string, so that a commit of a hundred records allocates a few
// times, not hundreds.
type fastDec struct {
	b     []byte
	i     int
	arena []byte
}

func newFastDec(b []byte) *fastDec {
	return &fastDec{b: b, arena: make([]byte, 0, len(b)*3/4)}
}

func (d *fastDec) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (d *fastDec) peek() byte {
	d.ws()
	if d.i >= len(d.b) {
		return 0
	}
	return d.b[d.i]
}

func (d *fastDec) expect(c byte) error {
	if d.peek() != c {
		return errSlowPath
	}
	d.i++
	return nil
}

// rawString returns a string without escapes or control characters, and
// moves past it.
func (d *fastDec) rawString() ([]byte, error) {
	if d.peek() != '"' {
		return nil, errSlowPath
	}
	start := d.i + 1
	for j := start; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			d.i = j + 1
			return d.b[start:j], nil
		case c == '\\' || c < 0x20:
			return nil, errSlowPath
		}
	}
	return nil, errSlowPath
}

// bytesValue decodes a base64 string into the arena.
func (d *fastDec) bytesValue() ([]byte, error) {
	s, err := d.rawString()
	if err != nil {
		return nil, err
	}
	n := strictStd.DecodedLen(len(s))
	if len(d.arena)+n > cap(d.arena) {
		return nil, errSlowPath // cannot happen: the arena holds 3/4 of the body
	}
	start := len(d.arena)
	dst := d.arena[start : start+n]
	m, err := strictStd.Decode(dst, s)
	if err != nil {
		return nil, errSlowPath
	}
	d.arena = d.arena[:start+m]
	return d.arena[start : start+m : start+m], nil
}

// uintValue reads an unsigned integer written as plain digits.
func (d *fastDec) uintValue() (uint64, error) {
	d.ws()
	start := d.i
	var n uint64
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		digit := uint64(d.b[d.i] - '0')
		if n > (1<<64-1-digit)/10 {
			return 0, errSlowPath
		}
		n = n*10 + digit
		d.i++
	}
	switch {
	case d.i == start, d.b[start] == '0' && d.i-start > 1:
		return 0, errSlowPath
	case d.i < len(d.b) && d.b[d.i] != ',' && d.b[d.i] != '}' && d.b[d.i] != ' ' && d.b[d.i] != '\t' && d.b[d.i] != '\n' && d.b[d.i] != '\r':
		return 0, errSlowPath // a fraction, an exponent, or garbage
	}
	return n, nil
}

// object reads an object whose fields are named in names, each at most
// once, calling field with the index of each name met.
func (d *fastDec) object(names []string, field func(int) error) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	if d.peek() == '}' {
		d.i++
		return nil
	}
	var seen uint32
	for {
		key, err := d.rawString()
		if err != nil {
			return err
		}
		idx := -1
		for j, n := range names {
			if string(key) == n {
				idx = j
			}
		}
		if idx < 0 || seen&(1<<idx) != 0 {
			return errSlowPath
		}
		seen |= 1 << idx
		if err := d.expect(':'); err != nil {
			return err
		}
		if err := field(idx); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return nil
		default:
			return errSlowPath
		}
	}
}

// array reads an array, calling elem for each element. An empty array is
// still an array: callers make its slice non-nil, as encoding/json does.
func (d *fastDec) array(elem func() error) error {
	if err := d.expect('['); err != nil {
		return err
	}
	if d.peek() == ']' {
		d.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return nil
		default:
			return errSlowPath
		}
	}
}

// bytesList reads an array of base64 strings.
func (d *fastDec) bytesList() ([][]byte, error) {
	out := [][]byte{}
	err := d.array(func() error {
		b, err := d.bytesValue()
		out = append(out, b)
		return err
	})
	return out, err
}

// end checks that nothing but white space follows the value.
func (d *fastDec) end() error {
	if d.ws(); d.i < len(d.b) {
		return errSlowPath
	}
	return nil
}

var (
	commitFields = []string{"puts", "deletes", "checkpoint", "epoch"}
	kvFields     = []string{"key", "value"}
	getFields    = []string{"keys"}
)

// fastCommit decodes a commit body in the fast decoder's subset.
func fastCommit(body []byte) (api.CommitRequest, error) {
	d := newFastDec(body)
	var req api.CommitRequest
	err := d.object(commitFields, func(f int) error {
		var err error
		switch f {
		case 0:
			req.Puts = []api.KV{}
			err = d.array(func() error {
				var kv api.KV
				err := d.object(kvFields, func(f int) error {
					b, err := d.bytesValue()
					if f == 0 {
						kv.Key = b
					} else {
						kv.Value = b
					}
					return err
				})
				req.Puts = append(req.Puts, kv)
				return err
			})
		case 1:
			req.Deletes, err = d.bytesList()
		case 2:
			req.Checkpoint, err = d.bytesValue()
		case 3:
			req.Epoch, err = d.uintValue()
		}
		return err
	})
	if err == nil {
		err = d.end()
	}
	return req, err
}

// fastGet decodes a batch get body in the fast decoder's subset.
func fastGet(body []byte) (api.GetRequest, error) {
	d := newFastDec(body)
	var req api.GetRequest
	err := d.object(getFields, func(int) error {
		var err error
		req.Keys, err = d.bytesList()
		return err
	})
	if err == nil {
		err = d.end()
	}
	return req, err
}

// decodeJSON decodes body into v (a *CommitRequest or *GetRequest): by the
// fast decoder when the body is in its subset, else by decodeStrict.
func decodeJSON(body []byte, v any) error {
	var err error
	switch v := v.(type) {
	case *api.CommitRequest:
		*v, err = fastCommit(body)
	case *api.GetRequest:
		*v, err = fastGet(body)
	default:
		err = errSlowPath
	}
	if err == nil {
		return nil
	}
	return decodeStrict(body, v)
}

// appendBase64 appends b as a JSON string of its standard base64, or null
// for nil, as encoding/json writes a []byte.
func appendBase64(dst, b []byte) []byte {
	if b == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

// appendGetResultJSON writes a batch get's answer as encoding/json would,
// without its reflection.
func appendGetResultJSON(dst []byte, values [][]byte) []byte {
	dst = append(dst, `{"values":[`...)
	for i, v := range values {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendBase64(dst, v)
	}
	return append(dst, "]}\n"...)
}

// appendScanResultJSON writes a scan's answer as encoding/json would.
func appendScanResultJSON(dst []byte, res api.ScanResult) []byte {
	dst = append(dst, `{"items":[`...)
	for i, kv := range res.Items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"key":`...)
		dst = appendBase64(dst, kv.Key)
		dst = append(dst, `,"value":`...)
		dst = appendBase64(dst, kv.Value)
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	if len(res.Next) > 0 {
		dst = append(dst, `,"next":`...)
		dst = appendBase64(dst, res.Next)
	}
	return append(dst, "}\n"...)
}

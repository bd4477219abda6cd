package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
)

// decodeStrict decodes the JSON value in body into v, a pointer to a struct,
// refusing what encoding/json lets through and a worker almost certainly
// did not mean:
//   - a key that is not a field's JSON name exactly (encoding/json matches
//     names case-insensitively, so "Epoch" would set epoch);
//   - a key given twice in one object (encoding/json keeps the last, so a
//     second "epoch" would slip past the epoch check, and a second "puts"
//     would drop the first list);
//   - a []byte field that is not standard, padded base64 with nothing else
//     in it (encoding/json skips '\r' and '\n', accepts non-zero padding
//     bits, and takes an array of numbers as the bytes);
//   - null for anything but bytes (encoding/json reads it as absent, so a
//     mis-serialized "epoch": null would skip the epoch check);
//   - anything after the value.
//
// The error says where the problem is, as a path like puts[2].key; v is
// then undefined. The checks are one pass over the bytes after
// encoding/json has decoded them.
func decodeStrict(body []byte, v any) error {
	t := reflect.TypeOf(v).Elem()
	if err := json.Unmarshal(body, v); err != nil {
		if !json.Valid(body) {
			return fmt.Errorf("the body is not valid JSON: %w", err)
		}
		// A type or base64 error: the scan names the field, if it
		// finds the problem.
		if serr := (&strictScanner{b: body}).value(t); serr != nil {
			return serr
		}
		return err
	}
	// The body is one valid JSON value of the right types; now refuse
	// what encoding/json read loosely.
	return (&strictScanner{b: body}).value(t)
}

// strictScanner walks a valid JSON document alongside the Go type it
// decodes into. path holds where it is (keys and indexes), so that an
// error can say so; it is turned into text only then.
type strictScanner struct {
	b    []byte
	i    int
	path []pathSeg
}

// pathSeg is a key, or an index when key is empty.
type pathSeg struct {
	key   string
	index int
}

// where names the current place: "the body", or a path like puts[2].key.
func (s *strictScanner) where() string {
	if len(s.path) == 0 {
		return "the body"
	}
	var b strings.Builder
	for _, p := range s.path {
		switch {
		case p.key == "":
			fmt.Fprintf(&b, "[%d]", p.index)
		case b.Len() > 0:
			b.WriteString("." + p.key)
		default:
			b.WriteString(p.key)
		}
	}
	return b.String()
}

var bytesType = reflect.TypeOf([]byte(nil))

func (s *strictScanner) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// value checks the value at s.i against t and moves past it.
func (s *strictScanner) value(t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s.ws()
	switch c := s.b[s.i]; {
	case c == '{' && t.Kind() == reflect.Struct:
		return s.object(t)
	case c == '[' && t == bytesType:
		// encoding/json would take an array of numbers as the bytes.
		return fmt.Errorf("%s is an array; bytes are a base64 string", s.where())
	case c == '[' && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		s.i++
		for n := 0; ; n++ {
			s.ws()
			if s.b[s.i] == ']' {
				s.i++
				return nil
			}
			s.path = append(s.path, pathSeg{index: n})
			if err := s.value(t.Elem()); err != nil {
				return err
			}
			s.path = s.path[:len(s.path)-1]
			s.ws()
			if s.b[s.i] == ',' {
				s.i++
			}
		}
	case c == '"' && t == bytesType:
		if err := strictBase64(s.str()); err != nil {
			return fmt.Errorf("%s %w", s.where(), err)
		}
		return nil
	case c == 'n' && t != bytesType:
		// encoding/json leaves what it reads null as it was, so a field
		// sent null would read as absent: an "epoch": null as no epoch.
		// Bytes alone may be null, the empty bytes, as it writes nil.
		if len(s.path) == 0 {
			return errors.New("the body is null; send a JSON object")
		}
		return fmt.Errorf("%s is null; give it a value, or leave the field out", s.where())
	}
	s.skip()
	return nil
}

// object checks an object whose Go type is the struct t.
func (s *strictScanner) object(t reflect.Type) error {
	fields := structFields(t)
	var seen uint64 // bit i: field i was given
	s.i++           // '{'
	for {
		s.ws()
		if s.b[s.i] == '}' {
			s.i++
			return nil
		}
		key := s.str()
		f, ok := fields.byName[string(key)]
		if !ok {
			return fmt.Errorf("unknown field %s in %s; fields are %s, spelled exactly (names are case-sensitive)",
				quote(string(key)), s.where(), strings.Join(fields.names, ", "))
		}
		if f.index < 64 {
			if seen&(1<<f.index) != 0 {
				return fmt.Errorf("field %s appears twice in %s; give each field once", quote(string(key)), s.where())
			}
			seen |= 1 << f.index
		}
		s.ws()
		s.i++ // ':'
		s.path = append(s.path, pathSeg{key: f.name})
		if err := s.value(f.typ); err != nil {
			return err
		}
		s.path = s.path[:len(s.path)-1]
		s.ws()
		if s.b[s.i] == ',' {
			s.i++
		}
	}
}

// str returns the string at s.i, unescaped, and moves past it. It aliases
// the body unless the string has escapes.
func (s *strictScanner) str() []byte {
	start := s.i
	s.i++ // '"'
	escaped := false
	for s.b[s.i] != '"' {
		if s.b[s.i] == '\\' {
			escaped = true
			s.i++
		}
		s.i++
	}
	s.i++
	if !escaped {
		return s.b[start+1 : s.i-1]
	}
	var out string
	_ = json.Unmarshal(s.b[start:s.i], &out) // valid JSON: cannot fail
	return []byte(out)
}

// skip moves past the value at s.i.
func (s *strictScanner) skip() {
	for depth := 0; ; {
		s.ws()
		switch s.b[s.i] {
		case '"':
			s.str()
		case '{', '[':
			depth++
			s.i++
		case '}', ']':
			depth--
			s.i++
		case ',', ':':
			s.i++
			continue
		default: // a number, true, false or null
			for s.i < len(s.b) && bytes.IndexByte([]byte(" \t\r\n,]}"), s.b[s.i]) < 0 {
				s.i++
			}
		}
		if depth == 0 {
			return
		}
	}
}

// strictBase64 accepts exactly what base64.StdEncoding.Strict() decodes
// and nothing with a line break: standard alphabet, padded to a multiple of
// 4, padding bits zero. (The standard decoder skips '\r' and '\n' even in
// strict mode.)
func strictBase64(s []byte) error {
	if bytes.ContainsAny(s, "\r\n") {
		return errors.New("has a line break in its base64; send it on one line")
	}
	if len(s)%4 != 0 {
		return fmt.Errorf("is not standard base64 with padding: its length %d is not a multiple of 4", len(s))
	}
	pad := len(s) - len(bytes.TrimRight(s, "="))
	if pad > 2 {
		return errors.New("is not standard base64 with padding: too much padding")
	}
	for i := 0; i < len(s)-pad; i++ {
		if b64Value(s[i]) < 0 {
			return fmt.Errorf("is not standard base64 with padding: %s at offset %d is not in the standard alphabet", quote(string(s[i:i+1])), i)
		}
	}
	// The last character before the padding carries bits the padding
	// drops; they must be zero, or two encodings would mean the same bytes.
	if pad > 0 && b64Value(s[len(s)-pad-1])&(1<<(2*pad)-1) != 0 {
		return errors.New("is not standard base64 with padding: the bits before the padding are not zero")
	}
	return nil
}

func b64Value(c byte) int {
	switch {
	case 'A' <= c && c <= 'Z':
		return int(c - 'A')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 26
	case '0' <= c && c <= '9':
		return int(c-'0') + 52
	case c == '+':
		return 62
	case c == '/':
		return 63
	}
	return -1
}

// fieldSet is the JSON view of a struct type: its fields by exact name.
type fieldSet struct {
	byName map[string]field
	names  []string // sorted, for messages
}

type field struct {
	name  string
	index int
	typ   reflect.Type
}

var fieldSets sync.Map // reflect.Type → *fieldSet

// structFields returns the JSON names of t's exported fields.
func structFields(t reflect.Type) *fieldSet {
	if fs, ok := fieldSets.Load(t); ok {
		return fs.(*fieldSet)
	}
	fs := &fieldSet{byName: map[string]field{}}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		fs.byName[name] = field{name: name, index: len(fs.names), typ: f.Type}
		fs.names = append(fs.names, name)
	}
	sort.Strings(fs.names)
	fieldSets.Store(t, fs)
	return fs
}

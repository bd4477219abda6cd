package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
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
//     in it (encoding/json skips '\r' and '\n', and accepts non-zero
//     padding bits);
//   - anything after the value.
//
// The error says where the problem is, as a path like puts[2].key.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := checkValue(dec, reflect.TypeOf(v).Elem(), ""); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value; send exactly one value")
	}
	// The value is well-formed and every key exact and single: the
	// standard decoder now reads it unambiguously (and checks the types).
	dec = json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

var bytesType = reflect.TypeOf([]byte(nil))

// checkValue reads the next value from dec, checking it against t.
func checkValue(dec *json.Decoder, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return syntaxError(err, path)
	}
	if tok == nil {
		return nil // null leaves the field as it is, as encoding/json does
	}
	switch {
	case t == bytesType:
		s, ok := tok.(string)
		if !ok {
			return skipRest(dec, tok) // a type error, reported by the second pass
		}
		if strings.ContainsAny(s, "\r\n") {
			return fmt.Errorf("%s has a line break in its base64; send it on one line", where(path))
		}
		if _, err := base64.StdEncoding.Strict().DecodeString(s); err != nil {
			return fmt.Errorf("%s is not standard base64 with padding (%v)", where(path), err)
		}
		return nil
	case t.Kind() == reflect.Struct && tok == json.Delim('{'):
		fields := jsonFields(t)
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return syntaxError(err, path)
			}
			key := kt.(string) // object keys are strings
			f, ok := fields[key]
			if !ok {
				return fmt.Errorf("unknown field %s in %s; fields are %s, spelled exactly (names are case-sensitive)",
					quote(key), where(path), strings.Join(sortedKeys(fields), ", "))
			}
			if seen[key] {
				return fmt.Errorf("field %s appears twice in %s; give each field once", quote(key), where(path))
			}
			seen[key] = true
			if err := checkValue(dec, f, join(path, key)); err != nil {
				return err
			}
		}
		_, err := dec.Token() // '}'
		return syntaxError(err, path)
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && tok == json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := checkValue(dec, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return syntaxError(err, path)
	}
	return skipRest(dec, tok)
}

// skipRest skips the rest of a value whose first token was tok.
func skipRest(dec *json.Decoder, tok json.Token) error {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	for depth := 1; depth > 0; {
		t, err := dec.Token()
		if err != nil {
			return syntaxError(err, "")
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// jsonFields maps the JSON names of t's exported fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
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
		out[name] = f.Type
	}
	return out
}

func sortedKeys(m map[string]reflect.Type) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func where(path string) string {
	if path == "" {
		return "the body"
	}
	return path
}

func syntaxError(err error, path string) error {
	if err == nil {
		return nil
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%s is not valid JSON: %w", where(path), err)
}

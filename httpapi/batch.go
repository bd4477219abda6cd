package httpapi

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/handoffhq/handoff/api"
)

// Defaults of the batch get's limits (Options.MaxGetKeys, MaxGetBytes).
const (
	DefaultMaxGetKeys  = api.DefaultMaxGetKeys // keys in one POST /tasks/{id}/get
	DefaultMaxGetBytes = 16 << 20              // bytes of the values one answers with
)

// bodyMedia returns the media type a request body is declared as, MediaJSON
// or MediaBinary, or "" for any other (a route then answers 415). JSON may
// say charset=utf-8 and nothing else; the binary type takes no parameters.
func bodyMedia(ct string) string {
	switch ct { // the forms clients send, without parsing
	case api.MediaJSON, api.MediaBinary:
		return ct
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	switch mt {
	case api.MediaJSON:
		for k, v := range params {
			if k != "charset" || !strings.EqualFold(v, "utf-8") {
				return ""
			}
		}
		return api.MediaJSON
	case api.MediaBinary:
		if len(params) == 0 {
			return api.MediaBinary
		}
	}
	return ""
}

// requireBody refuses a body that is neither declared as JSON nor as the
// binary form (415). Neither is a type a web page may send another origin
// without the browser asking first, unlike form and text/plain bodies.
func (s *Server) requireBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if bodyMedia(ct) == "" {
			got := "no Content-Type"
			if ct != "" {
				got = "Content-Type " + quote(ct)
			}
			s.writeError(w, r, http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType,
				fmt.Sprintf("the body must be JSON sent with Content-Type: %s, or the binary form sent with Content-Type: %s; this request has %s",
					api.MediaJSON, api.MediaBinary, got))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isBinaryBody reports whether a request that passed requireBody has the
// binary form.
func isBinaryBody(r *http.Request) bool {
	return bodyMedia(r.Header.Get("Content-Type")) == api.MediaBinary
}

// wantsBinary reports whether the request's Accept header prefers the
// binary form to JSON: it names the binary type with a quality above
// JSON's (application/json, application/* or */*), or equal to it when
// JSON is matched only by a wildcard. Without Accept the answer is JSON.
func wantsBinary(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	switch accept {
	case "", api.MediaJSON, "*/*":
		return false
	case api.MediaBinary:
		return true
	}
	var qBin, qJSON float64 = 0, 0
	jsonNamed := false
	for part := range strings.SplitSeq(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f <= 1 {
				q = f
			}
		}
		switch mt {
		case api.MediaBinary:
			qBin = max(qBin, q)
		case api.MediaJSON:
			jsonNamed = true
			qJSON = max(qJSON, q)
		case "application/*", "*/*":
			qJSON = max(qJSON, q)
		}
	}
	return qBin > 0 && (qBin > qJSON || qBin == qJSON && !jsonNamed)
}

// getMany answers POST /tasks/{id}/get: the values of many keys, in the
// order asked, read at one point in time.
func (s *Server) getMany(w http.ResponseWriter, r *http.Request) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	keys, ok := s.getKeys(w, r)
	if !ok {
		return
	}
	vals, err := s.b.GetMany(id, keys, s.opts.MaxGetBytes)
	if err != nil {
		s.backendError(w, r, err)
		return
	}
	s.writeValues(w, r, vals)
}

// getKeys reads and checks the keys of a batch get's body, JSON or
// binary. On failure it has answered and returns false.
func (s *Server) getKeys(w http.ResponseWriter, r *http.Request) ([][]byte, bool) {
	body, ok := s.readBody(w, r, "batch get body")
	if !ok {
		return nil, false
	}
	var keys [][]byte
	if isBinaryBody(r) {
		var err error
		if keys, err = api.DecodeGetBinary(body); err != nil {
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid, fmt.Sprintf("the batch get body is not a valid binary get: %v", err))
			return nil, false
		}
	} else {
		var req api.GetRequest
		if err := decodeJSON(body, &req); err != nil {
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				fmt.Sprintf(`the batch get body is not a valid batch get: %v (send {"keys":["<base64>",...]})`, err))
			return nil, false
		}
		if req.Keys == nil { // null is refused above: the field is missing
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				`the batch get body has no "keys"; send {"keys":["<base64>",...]}`)
			return nil, false
		}
		keys = req.Keys
	}
	if len(keys) > s.opts.MaxGetKeys {
		s.writeError(w, r, http.StatusRequestEntityTooLarge, api.CodeTooLarge,
			fmt.Sprintf("the batch get asks for %d keys; ask for at most %d at a time", len(keys), s.opts.MaxGetKeys))
		return nil, false
	}
	for i, k := range keys {
		switch {
		case len(k) == 0:
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid, fmt.Sprintf("keys[%d] is empty; every key is at least one byte", i))
			return nil, false
		case len(k) > s.opts.MaxKeyBytes:
			s.writeError(w, r, http.StatusRequestEntityTooLarge, api.CodeTooLarge,
				fmt.Sprintf("keys[%d] is %d bytes; keys are at most %d bytes", i, len(k), s.opts.MaxKeyBytes))
			return nil, false
		}
	}
	return keys, true
}

// writeValues answers a batch get with vals, in the form Accept asks for.
func (s *Server) writeValues(w http.ResponseWriter, r *http.Request, vals [][]byte) {
	if wantsBinary(r) {
		s.writeBody(w, api.MediaBinary, api.AppendValuesBinary(nil, vals))
		return
	}
	s.writeBody(w, api.MediaJSON, appendGetResultJSON(nil, vals))
}

// Header values of the state routes' answers, shared: net/http only reads
// them.
var (
	headerNoStore     = []string{"no-store"}
	headerJSON        = []string{api.MediaJSON}
	headerBinary      = []string{api.MediaBinary}
	headerOctetStream = []string{"application/octet-stream"}
)

// writeBody answers 200 with body of media type mt.
func (s *Server) writeBody(w http.ResponseWriter, mt string, body []byte) {
	h := w.Header()
	switch mt {
	case api.MediaBinary:
		h["Content-Type"] = headerBinary
	case api.MediaJSON:
		h["Content-Type"] = headerJSON
	default:
		h["Content-Type"] = headerOctetStream
	}
	h["Cache-Control"] = headerNoStore
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// readAllFirst and readAllSecond are the buffers readAll reads a larger
// body into before one of its declared length: a small one first, so that
// a body that trickles in (a flood's, thousands a second) costs a small
// allocation, not a large one the garbage collector has to clear and
// scan; then one that still holds little more than what a trickling body
// has sent.
const (
	readAllFirst  = 512
	readAllSecond = 64 << 10
)

// readAll reads rd to its end into one buffer of the declared length
// (a body's Content-Length, when it is within max), rather than growing
// one as io.ReadAll does. A body declared larger than readAllFirst is
// read into a buffer of that size first, then of readAllSecond, then of
// its declared length, each taken only once the one before is full.
func readAll(rd io.Reader, declared, max int64) ([]byte, error) {
	if declared <= 0 || declared > max {
		return io.ReadAll(rd)
	}
	var (
		buf []byte
		n   int
	)
	// One more than declared, to see the end in the same read.
	for _, size := range [...]int64{readAllFirst, readAllSecond, declared + 1} {
		size = min(size, declared+1)
		if int64(len(buf)) >= size {
			continue
		}
		grown := make([]byte, size)
		copy(grown, buf[:n])
		buf = grown
		m, err := io.ReadFull(rd, buf[n:])
		n += m
		switch {
		case err == io.ErrUnexpectedEOF || (err == io.EOF && n > 0): // the body ended in this part, or with the last
			return buf[:n], nil
		case err != nil:
			return nil, err
		}
	}
	// More than declared: net/http refuses it, but read on to say so.
	rest, err := io.ReadAll(rd)
	return append(buf, rest...), err
}

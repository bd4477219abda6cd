package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"hash/maphash"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/handoffhq/handoff/api"
)

// Health is the body of /healthz and of a ready /readyz.
type Health struct {
	Status string `json:"status"`
}

// MaxTaskIDLen is the longest task ID the API accepts.
const MaxTaskIDLen = 128

// ValidTaskID reports whether id may name a task: 1 to 128 ASCII letters,
// digits, '_' or '-'.
func ValidTaskID(id string) bool {
	if len(id) == 0 || len(id) > MaxTaskIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// taskID returns the validated {id} of the path, or answers 400 and
// returns false.
func (s *Server) taskID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := chi.URLParam(r, "id")
	if !ValidTaskID(id) {
		s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
			fmt.Sprintf("task ID %s is invalid: use 1 to %d ASCII letters, digits, '_' or '-'", quote(id), MaxTaskIDLen))
		return "", false
	}
	return id, true
}

// query parses the query string, refusing parameters other than allowed and
// repeated ones, so that a typo (?wiat=30s) is an error instead of a
// silently different request.
func (s *Server) query(w http.ResponseWriter, r *http.Request, allowed ...string) (map[string]string, bool) {
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
			fmt.Sprintf("malformed query string: %v; percent-encode special characters", err))
		return nil, false
	}
	out := make(map[string]string, len(vals))
	for k, v := range vals {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				fmt.Sprintf("unknown query parameter %s on %s; it takes %s", quote(k), r.URL.Path, strings.Join(allowed, ", ")))
			return nil, false
		}
		if len(v) != 1 {
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				fmt.Sprintf("query parameter %s is given %d times; give it once", k, len(v)))
			return nil, false
		}
		out[k] = v[0]
	}
	return out, true
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, http.StatusOK, Health{Status: "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.b.Ready(); err != nil {
		s.writeError(w, r, http.StatusServiceUnavailable, api.CodeUnavailable, "not ready: "+err.Error())
		return
	}
	s.writeJSON(w, http.StatusOK, Health{Status: "ready"})
}

// assignment answers GET /assignment[?wait=D&after=V]. Without wait, or when
// the view's version is already past after, it answers at once; otherwise
// it waits up to wait (capped by MaxLongPoll) for the version to pass after
// and then answers with the view as it is.
func (s *Server) assignment(w http.ResponseWriter, r *http.Request) {
	q, ok := s.query(w, r, "wait", "after")
	if !ok {
		return
	}
	var wait time.Duration
	if v, set := q["wait"]; set {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				fmt.Sprintf("wait=%s is not a duration: use a non-negative Go duration such as 30s or 500ms", quote(v)))
			return
		}
		wait = min(d, s.opts.MaxLongPoll)
	}
	var after uint64
	if v, set := q["after"]; set {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				fmt.Sprintf("after=%s is not a version: pass the version of the last view you received (a non-negative integer)", quote(v)))
			return
		}
		after = n
	}
	defer s.worker.begin()()
	view := s.b.Assignment()
	if wait > 0 && view.Version <= after {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		stop := context.AfterFunc(s.closing, cancel)
		view = s.b.WaitAssignment(ctx, after)
		stop()
		cancel()
	}
	s.writeJSON(w, http.StatusOK, normalizeView(view))
	if view.Shutdown {
		s.shutdownSentOnce.Do(func() { close(s.shutdownSent) })
	}
}

// normalizeView makes empty lists [] rather than null, so that workers in
// any language can iterate them without a nil check.
func normalizeView(v api.View) api.View {
	if v.Tasks == nil {
		v.Tasks = []api.TaskView{}
	}
	if v.Revoke == nil {
		v.Revoke = []string{}
	}
	return v
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	q, ok := s.query(w, r, "epoch")
	if !ok {
		return
	}
	var epoch uint64
	if v, set := q["epoch"]; set {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				fmt.Sprintf("epoch=%s is not an epoch: pass the task's epoch from /assignment (a positive integer)", quote(v)))
			return
		}
		epoch = n
	}
	res, err := s.b.Release(r.Context(), id, epoch)
	if err != nil {
		s.backendError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, res)
}

// get answers GET /tasks/{id}/state/{key} with the raw value. The key is
// the rest of the path, percent-decoded, so it may hold any bytes,
// including '/'.
func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	key, ok := s.pathKey(w, r, "/tasks/"+id+"/state/")
	if !ok {
		return
	}
	val, err := s.b.Get(id, key)
	if err != nil {
		s.backendError(w, r, err)
		return
	}
	s.writeBody(w, "", val)
}

// pathKey returns the key of a get route: the rest of the path after
// prefix, or answers 400 and returns false.
func (s *Server) pathKey(w http.ResponseWriter, r *http.Request, prefix string) ([]byte, bool) {
	// chi's wildcard is the raw or the decoded path depending on whether
	// the request needed RawPath; r.URL.Path is always decoded, and the
	// prefix is plain ASCII because the task ID is valid.
	if !strings.HasPrefix(r.URL.Path, prefix) {
		s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
			"the task ID in the path must not be percent-encoded")
		return nil, false
	}
	key := []byte(strings.TrimPrefix(r.URL.Path, prefix))
	if len(key) == 0 {
		s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
			"the key is empty: GET "+strings.TrimSuffix(prefix, "/")+"/{key} with the key percent-encoded, or GET "+strings.TrimSuffix(prefix, "/")+" to scan")
		return nil, false
	}
	if len(key) > s.opts.MaxKeyBytes {
		s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
			fmt.Sprintf("the key is %d bytes; keys are at most %d bytes", len(key), s.opts.MaxKeyBytes))
		return nil, false
	}
	return key, true
}

// scan answers GET /tasks/{id}/state?prefix=&start=&limit=.
func (s *Server) scan(w http.ResponseWriter, r *http.Request) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	q, ok := s.query(w, r, "prefix", "start", "prefix_b64", "start_b64", "limit")
	if !ok {
		return
	}
	o, limit, ok := s.scanOptions(w, r, q)
	if !ok {
		return
	}
	items, err := s.b.Scan(id, o)
	if err != nil {
		s.backendError(w, r, err)
		return
	}
	s.writeScan(w, r, items, limit)
}

// scanOptions reads a scan's range from its query parameters q. It asks
// for one item more than the page's limit, so that "next" is exact
// (writeScan). On failure it has answered 400 and returns false.
func (s *Server) scanOptions(w http.ResponseWriter, r *http.Request, q map[string]string) (api.ScanOptions, int, bool) {
	var o api.ScanOptions
	for _, p := range []struct {
		name string
		dst  *[]byte
	}{{"prefix", &o.Prefix}, {"start", &o.Start}} {
		raw, rawSet := q[p.name]
		enc, encSet := q[p.name+"_b64"]
		switch {
		case rawSet && encSet:
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				fmt.Sprintf("give %s or %s_b64, not both", p.name, p.name))
			return o, 0, false
		case rawSet:
			*p.dst = []byte(raw)
		case encSet:
			b, err := decodeBase64(enc)
			if err != nil {
				s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
					fmt.Sprintf("%s_b64 is not base64 (%v); encode the bytes with base64 and percent-encode '+' as %%2B", p.name, err))
				return o, 0, false
			}
			*p.dst = b
		}
		if len(*p.dst) > s.opts.MaxKeyBytes {
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				fmt.Sprintf("%s is %d bytes; keys are at most %d bytes", p.name, len(*p.dst), s.opts.MaxKeyBytes))
			return o, 0, false
		}
	}
	limit := min(DefaultScanLimit, s.opts.MaxScanLimit)
	if v, set := q["limit"]; set {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				fmt.Sprintf("limit=%s is invalid: use a positive integer (at most %d items are returned)", quote(v), s.opts.MaxScanLimit))
			return o, 0, false
		}
		limit = min(n, s.opts.MaxScanLimit)
	}
	o.Limit = limit + 1
	return o, limit, true
}

// writeScan answers with a page of at most limit of items, and the key to
// continue from.
func (s *Server) writeScan(w http.ResponseWriter, r *http.Request, items []api.KV, limit int) {
	res := api.ScanResult{Items: items}
	switch {
	case len(items) > limit:
		res.Next = items[limit].Key
		res.Items = items[:limit]
	case len(items) == limit && limit > 0:
		// The backend may cut scans shorter than asked; continue right
		// after the last key to be safe (at worst one empty page).
		last := items[limit-1].Key
		res.Next = append(bytes.Clone(last), 0)
	}
	if wantsBinary(r) {
		s.writeBody(w, api.MediaBinary, api.AppendScanBinary(nil, res))
		return
	}
	s.writeBody(w, api.MediaJSON, appendScanResultJSON(nil, res))
}

// decodeBase64 accepts standard and URL-safe base64, padded or not. A space
// is read as '+', which an unencoded '+' in a query string turns into.
func decodeBase64(s string) ([]byte, error) {
	s = strings.ReplaceAll(s, " ", "+")
	var firstErr error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		b, err := enc.DecodeString(s)
		if err == nil {
			return b, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

// commit answers POST /tasks/{id}/commit. The body is validated in full
// before the Backend sees it, so a bad request changes nothing.
func (s *Server) commit(w http.ResponseWriter, r *http.Request) {
	id, ok := s.taskID(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r, "commit body")
	if !ok {
		return
	}
	req, status, msg := s.decodeCommit(body, isBinaryBody(r))
	if status != 0 {
		code := api.CodeInvalid
		if status == http.StatusRequestEntityTooLarge {
			code = api.CodeTooLarge
		}
		s.writeError(w, r, status, code, msg)
		return
	}
	res, err := s.b.Commit(r.Context(), id, req)
	if err != nil {
		s.backendError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, res)
}

// decodeCommit parses and validates a commit body, JSON or binary. A
// non-zero status says why it is refused.
func (s *Server) decodeCommit(body []byte, binary bool) (req api.CommitRequest, status int, msg string) {
	if binary {
		var err error
		if req, err = api.DecodeCommitBinary(body); err != nil {
			return api.CommitRequest{}, http.StatusBadRequest, fmt.Sprintf("the commit body is not a valid binary commit: %v", err)
		}
	} else {
		trimmed := bytes.TrimLeft(body, " \t\r\n")
		if len(trimmed) == 0 || trimmed[0] != '{' {
			return req, http.StatusBadRequest,
				`the commit body must be a JSON object: {"puts":[{"key":"<base64>","value":"<base64>"}],"deletes":["<base64>"],"checkpoint":"<base64>","epoch":N}`
		}
		if err := decodeJSON(body, &req); err != nil {
			return api.CommitRequest{}, http.StatusBadRequest, fmt.Sprintf("the commit body is not a valid commit: %v (keys, values and the checkpoint are base64)", err)
		}
	}
	status, msg = s.validateCommit(req)
	return req, status, msg
}

// validateCommit checks a decoded commit against the limits and refuses a
// key given twice, whichever form the body had. A commit that passes
// every check is told in one pass that allocates once (commitValid); only
// one that fails is checked again, in order, to say what fails first.
func (s *Server) validateCommit(req api.CommitRequest) (status int, msg string) {
	if len(req.Puts) == 0 && len(req.Deletes) == 0 && len(req.Checkpoint) == 0 {
		// It would append an entry to the changelog and change nothing.
		return http.StatusBadRequest, "the commit has nothing in it: send puts, deletes or a checkpoint (an epoch alone changes nothing)"
	}
	if s.commitValid(req) {
		return 0, ""
	}
	seen := make(map[string]struct{}, len(req.Puts)+len(req.Deletes))
	checkKey := func(what string, i int, k []byte) (int, string) {
		if len(k) == 0 {
			return http.StatusBadRequest, fmt.Sprintf("%s[%d] has an empty key; every key must be at least one byte", what, i)
		}
		if len(k) > s.opts.MaxKeyBytes {
			return http.StatusRequestEntityTooLarge, fmt.Sprintf("%s[%d] has a %d-byte key; keys are at most %d bytes", what, i, len(k), s.opts.MaxKeyBytes)
		}
		if _, dup := seen[string(k)]; dup {
			return http.StatusBadRequest, fmt.Sprintf("%s[%d]: key %s appears more than once in the commit; send each key once", what, i, quote(string(k)))
		}
		seen[string(k)] = struct{}{}
		return 0, ""
	}
	for i, kv := range req.Puts {
		if st, m := checkKey("puts", i, kv.Key); st != 0 {
			return st, m
		}
		if len(kv.Value) > s.opts.MaxValueBytes {
			return http.StatusRequestEntityTooLarge,
				fmt.Sprintf("puts[%d] has a %d-byte value; values are at most %d bytes", i, len(kv.Value), s.opts.MaxValueBytes)
		}
	}
	for i, k := range req.Deletes {
		if st, m := checkKey("deletes", i, k); st != 0 {
			return st, m
		}
	}
	if len(req.Checkpoint) > s.opts.MaxValueBytes {
		return http.StatusRequestEntityTooLarge,
			fmt.Sprintf("the checkpoint is %d bytes; it is at most %d bytes", len(req.Checkpoint), s.opts.MaxValueBytes)
	}
	return 0, ""
}

// keySeed seeds the hashes commitValid finds repeated keys by.
var keySeed = maphash.MakeSeed()

// commitValid reports whether req is within the limits and names no key
// twice. It may say false of a valid commit (two keys whose hashes
// collide); validateCommit then checks it key by key.
func (s *Server) commitValid(req api.CommitRequest) bool {
	n := len(req.Puts) + len(req.Deletes)
	size := 4
	for size < 2*n {
		size <<= 1
	}
	table := make([]uint64, size) // open addressing; 0 is free
	mask := uint64(size - 1)
	add := func(k []byte) bool {
		if len(k) == 0 || len(k) > s.opts.MaxKeyBytes {
			return false
		}
		h := maphash.Bytes(keySeed, k) | 1
		for i := h & mask; ; i = (i + 1) & mask {
			switch table[i] {
			case 0:
				table[i] = h
				return true
			case h:
				return false
			}
		}
	}
	for _, kv := range req.Puts {
		if !add(kv.Key) || len(kv.Value) > s.opts.MaxValueBytes {
			return false
		}
	}
	for _, k := range req.Deletes {
		if !add(k) {
			return false
		}
	}
	return len(req.Checkpoint) <= s.opts.MaxValueBytes
}

func (s *Server) leave(w http.ResponseWriter, r *http.Request) {
	st, err := s.b.Leave(r.Context())
	if err != nil {
		s.backendError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusAccepted, normalizeLeave(st))
}

func (s *Server) leaveStatus(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, http.StatusOK, normalizeLeave(s.b.LeaveStatus()))
}

func normalizeLeave(st api.LeaveStatus) api.LeaveStatus {
	if st.Remaining == nil {
		st.Remaining = []string{}
	}
	return st
}

func (s *Server) group(w http.ResponseWriter, r *http.Request) {
	g, err := s.b.Group(r.Context())
	if err != nil {
		s.backendError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, g)
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if s.opts.Metrics == nil {
		s.writeError(w, r, http.StatusNotFound, api.CodeNotFound, "metrics are not enabled on this agent")
		return
	}
	s.opts.Metrics.ServeHTTP(w, r)
}

// quote quotes s for a message, cut to a readable length.
func quote(s string) string {
	const maxLen = 64
	if len(s) > maxLen {
		return strconv.Quote(s[:maxLen]) + "..."
	}
	return strconv.Quote(s)
}

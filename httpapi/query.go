package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/handoffhq/handoff/api"
)

// The query routes read any task's state on any member, within a bound:
// GET /query/tasks/{id}/state/{key}, POST /query/tasks/{id}/get and
// GET /query/tasks/{id}/state, in the shapes of the worker's read routes,
// with ?min_seq=, ?max_lag= and ?timeout=. Every answer a copy gave says
// who served it (api.HeaderServedBy, HeaderRole, HeaderSeq, HeaderRouted).

// queryOf reads a query's bound and timeout from its parameters q into
// qr. On failure it has answered 400 and returns false.
func (s *Server) queryOf(w http.ResponseWriter, r *http.Request, q map[string]string, qr *api.Query) bool {
	if v, set := q["min_seq"]; set {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				fmt.Sprintf("min_seq=%s is not a sequence: pass a commit's seq (a non-negative integer)", quote(v)))
			return false
		}
		qr.Bound.MinSeq = n
	}
	if v, set := q["max_lag"]; set {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				fmt.Sprintf("max_lag=%s is not a lag: pass how many changelog messages behind a copy may be (a non-negative integer)", quote(v)))
			return false
		}
		qr.Bound.MaxLag, qr.Bound.Lagged = n, true
	}
	if v, set := q["timeout"]; set {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid,
				fmt.Sprintf("timeout=%s is not a duration: use a positive Go duration such as 2s or 500ms (at most %s)", quote(v), api.MaxQueryTimeout))
			return false
		}
		qr.Timeout = min(d, api.MaxQueryTimeout)
	}
	return true
}

// queryStart reads a query route's task ID and parameters (params, on
// top of the bound's) into a query of kind. On failure it has answered
// and returns false.
func (s *Server) queryStart(w http.ResponseWriter, r *http.Request, kind api.QueryKind, q map[string]string, ok bool) (api.Query, bool) {
	if !ok {
		return api.Query{}, false
	}
	id, ok := s.taskID(w, r)
	if !ok {
		return api.Query{}, false
	}
	qr := api.Query{Kind: kind, Task: id}
	return qr, s.queryOf(w, r, q, &qr)
}

// ask runs qr on the backend and sets the headers of the copy that
// answered. On failure it has answered and returns false.
func (s *Server) ask(w http.ResponseWriter, r *http.Request, qr api.Query) (api.QueryAnswer, bool) {
	ans, err := s.b.Query(r.Context(), qr)
	if ans.Member != "" {
		setServed(w.Header(), ans.Served)
	}
	if err != nil {
		s.backendError(w, r, err)
		return ans, false
	}
	return ans, true
}

// setServed sets the headers that say which copy answered.
func setServed(h http.Header, sv api.Served) {
	h[api.HeaderServedBy] = []string{sv.Member}
	h[api.HeaderRole] = []string{sv.Role}
	h[api.HeaderSeq] = []string{strconv.FormatUint(sv.Seq, 10)}
	h[api.HeaderRouted] = []string{strconv.FormatBool(sv.Routed)}
}

// queryGet answers GET /query/tasks/{id}/state/{key} with the raw value,
// or 404 not_found when the key is absent at the answer's sequence.
func (s *Server) queryGet(w http.ResponseWriter, r *http.Request) {
	q, ok := s.query(w, r, "min_seq", "max_lag", "timeout")
	qr, ok := s.queryStart(w, r, api.QueryGet, q, ok)
	if !ok {
		return
	}
	key, ok := s.pathKey(w, r, "/query/tasks/"+qr.Task+"/state/")
	if !ok {
		return
	}
	qr.Keys = [][]byte{key}
	ans, ok := s.ask(w, r, qr)
	if !ok {
		return
	}
	if len(ans.Values) != 1 || ans.Values[0] == nil {
		s.writeError(w, r, http.StatusNotFound, api.CodeNotFound,
			fmt.Sprintf("task %s has no key %s at seq %d (member %s's copy)", qr.Task, quote(string(key)), ans.Seq, ans.Member))
		return
	}
	s.writeBody(w, "", ans.Values[0])
}

// queryGetMany answers POST /query/tasks/{id}/get.
func (s *Server) queryGetMany(w http.ResponseWriter, r *http.Request) {
	q, ok := s.query(w, r, "min_seq", "max_lag", "timeout")
	qr, ok := s.queryStart(w, r, api.QueryGetMany, q, ok)
	if !ok {
		return
	}
	qr.MaxBytes = s.opts.MaxGetBytes
	if qr.Keys, ok = s.getKeys(w, r); !ok {
		return
	}
	ans, ok := s.ask(w, r, qr)
	if !ok {
		return
	}
	s.writeValues(w, r, ans.Values)
}

// queryScan answers GET /query/tasks/{id}/state.
func (s *Server) queryScan(w http.ResponseWriter, r *http.Request) {
	q, ok := s.query(w, r, "prefix", "start", "prefix_b64", "start_b64", "limit", "min_seq", "max_lag", "timeout")
	qr, ok := s.queryStart(w, r, api.QueryScan, q, ok)
	if !ok {
		return
	}
	o, limit, ok := s.scanOptions(w, r, q)
	if !ok {
		return
	}
	qr.Scan = o
	ans, ok := s.ask(w, r, qr)
	if !ok {
		return
	}
	s.writeScan(w, r, ans.Items, limit)
}

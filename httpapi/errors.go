package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/handoffhq/handoff/api"
)

// errorStatus maps a Backend error to a status and code. ok is false for an
// error the API does not know, which becomes 500 internal.
func errorStatus(err error) (status int, code string, ok bool) {
	switch {
	case errors.Is(err, api.ErrInvalid):
		return http.StatusBadRequest, api.CodeInvalid, true
	case errors.Is(err, api.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, api.CodeTooLarge, true
	case errors.Is(err, api.ErrUnknownTask):
		return http.StatusNotFound, api.CodeUnknownTask, true
	case errors.Is(err, api.ErrNotFound):
		return http.StatusNotFound, api.CodeNotFound, true
	case errors.Is(err, api.ErrNotOwner):
		return http.StatusConflict, api.CodeNotOwner, true
	case errors.Is(err, api.ErrNotRevoked):
		return http.StatusConflict, api.CodeNotRevoked, true
	case errors.Is(err, api.ErrResume):
		return http.StatusConflict, api.CodeResume, true
	case errors.Is(err, api.ErrUnavailable):
		return http.StatusServiceUnavailable, api.CodeUnavailable, true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away or the agent is shutting down.
		return http.StatusServiceUnavailable, api.CodeUnavailable, true
	}
	return http.StatusInternalServerError, api.CodeInternal, false
}

// backendError answers with the status and code of a Backend error. The
// Backend's message is meant for people and is passed on; an unknown error
// is logged and answered with a generic 500.
func (s *Server) backendError(w http.ResponseWriter, r *http.Request, err error) {
	status, code, ok := errorStatus(err)
	if !ok {
		s.log.Error().Err(err).Str(fieldMethod, r.Method).Str(fieldPath, r.URL.Path).Msg("http api: backend failed")
		s.writeError(w, r, status, code, "internal error; the agent logged the details")
		return
	}
	msg := err.Error()
	if code == api.CodeUnavailable && r.Context().Err() != nil {
		msg = "the request was cancelled before it completed (the client went away or the agent is shutting down); retry"
	}
	s.writeError(w, r, status, code, msg)
}

func (s *Server) writeError(w http.ResponseWriter, _ *http.Request, status int, code, msg string) {
	s.errors.WithLabelValues(code).Inc()
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	s.writeJSON(w, status, api.ErrorBody{Code: code, Message: msg})
}

func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error().Err(err).Msg("http api: encode response")
		b = []byte(`{"code":"internal","message":"internal error; the agent logged the details"}`)
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

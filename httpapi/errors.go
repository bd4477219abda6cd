package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
)

// Error codes of the API. They are stable: workers branch on them.
const (
	CodeInvalid          = "invalid"            // 400: the request is malformed; fix it
	CodeTooLarge         = "too_large"          // 413: body, key or value over a limit
	CodeUnauthorized     = "unauthorized"       // 401: missing or wrong token
	CodeUnknownTask      = "unknown_task"       // 404: the task is not one of the group's tasks
	CodeNotFound         = "not_found"          // 404: no such key, or no such route
	CodeNotOwner         = "not_owner"          // 409: this member is not the task's active owner
	CodeNotRevoked       = "not_revoked"        // 409: release of a task that is not being revoked
	CodeResume           = "resume"             // 409: restart the task from the checkpoint in /assignment; don't retry the commit
	CodeUnavailable      = "unavailable"        // 503: not ready or shutting down; retry
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeInternal         = "internal"           // 500: a bug or an unexpected failure; see the agent's log

	CodeUnsupportedMediaType = "unsupported_media_type" // 415: a JSON route got a body not sent as application/json
	CodeHostNotAllowed       = "host_not_allowed"       // 403: the Host header names another server (DNS rebinding)
	CodeCrossOrigin          = "cross_origin"           // 403: a browser sent a POST from another origin
	CodeTimeout              = "timeout"                // 408: the request body arrived too slowly
)

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// errorStatus maps a Backend error to a status and code. ok is false for an
// error the API does not know, which becomes 500 internal.
func errorStatus(err error) (status int, code string, ok bool) {
	switch {
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest, CodeInvalid, true
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge, CodeTooLarge, true
	case errors.Is(err, ErrUnknownTask):
		return http.StatusNotFound, CodeUnknownTask, true
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, CodeNotFound, true
	case errors.Is(err, ErrNotOwner):
		return http.StatusConflict, CodeNotOwner, true
	case errors.Is(err, ErrNotRevoked):
		return http.StatusConflict, CodeNotRevoked, true
	case errors.Is(err, ErrResume):
		return http.StatusConflict, CodeResume, true
	case errors.Is(err, ErrUnavailable):
		return http.StatusServiceUnavailable, CodeUnavailable, true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away or the agent is shutting down.
		return http.StatusServiceUnavailable, CodeUnavailable, true
	}
	return http.StatusInternalServerError, CodeInternal, false
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
	if code == CodeUnavailable && r.Context().Err() != nil {
		msg = "the request was cancelled before it completed (the client went away or the agent is shutting down); retry"
	}
	s.writeError(w, r, status, code, msg)
}

func (s *Server) writeError(w http.ResponseWriter, _ *http.Request, status int, code, msg string) {
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	s.writeJSON(w, status, ErrorBody{Code: code, Message: msg})
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

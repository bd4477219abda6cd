package api

import "errors"

// Errors the agent returns (wrapped, with a message a person can act on):
// httpapi answers each with an HTTP status and the stable code beside it,
// and client maps a code back to its sentinel, so errors.Is holds on both
// sides of the wire.
var (
	ErrUnknownTask = errors.New("unknown task")         // 404 unknown_task
	ErrNotFound    = errors.New("key not found")        // 404 not_found
	ErrNotOwner    = errors.New("not the active owner") // 409 not_owner
	ErrNotRevoked  = errors.New("task is not revoked")  // 409 not_revoked
	// ErrResume refuses a commit because the task's copy holds a commit of
	// this owner that the worker was not told of (its acknowledgement was
	// lost, or the agent had to replay it): retrying would apply the work
	// twice; the worker restarts the task from the checkpoint in
	// /assignment, which includes that commit.
	ErrResume      = errors.New("resume from the checkpoint") // 409 resume
	ErrInvalid     = errors.New("invalid request")            // 400 invalid
	ErrTooLarge    = errors.New("request too large")          // 413 too_large
	ErrUnavailable = errors.New("temporarily unavailable")    // 503 unavailable
)

// Error codes of the API, the code of an ErrorBody. They are stable:
// workers branch on them.
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

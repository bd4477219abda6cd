package conformance

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/handoffhq/handoff/api"
)

// Kinds of recorded calls.
const (
	callAssignment = "assignment"
	callCommit     = "commit"
	callRelease    = "release"
	callOther      = "other"
)

// Faults the proxy can answer with instead of the agent.
const (
	faultUnavailable = "unavailable" // 503, not forwarded
	faultNotOwner    = "not_owner"   // 409 not_owner, not forwarded
	faultResume      = "resume"      // forwarded; the agent's 200 is answered with 409 resume
	faultHang        = "hang"        // not forwarded and not answered, as by a paused agent
)

// hangMax is how long the proxy leaves a hung call unanswered at most;
// then it answers 503, so that a worker without timeouts still goes on.
const hangMax = 20 * time.Second

// call is one request of the worker, as the proxy saw it.
type call struct {
	Kind   string
	Method string
	Path   string
	Query  url.Values
	Task   string
	Start  time.Time
	End    time.Time // zero while the call is open
	Status int
	Code   string // error code of a non-2xx answer
	// Fault is the fault the proxy answered with, if any.
	Fault string
	// Commit is the decoded body of a commit (nil if it did not decode).
	Commit *api.CommitRequest
	Body   []byte // the raw commit body
	// View is the view answered to a GET /assignment, as the worker got it.
	View *api.View
	// Hidden is the task whose activation this view hid, if any.
	Hidden string
	// Abandoned says the worker closed the connection of a hung call
	// before the proxy answered it.
	Abandoned bool
}

// epoch is the ?epoch= of a release (0 if absent or invalid).
func (c *call) releaseEpoch() uint64 {
	var n uint64
	for _, ch := range c.Query.Get("epoch") {
		if ch < '0' || ch > '9' {
			return 0
		}
		n = n*10 + uint64(ch-'0')
	}
	return n
}

// recorder keeps every call in the order the calls started.
type recorder struct {
	mu    sync.Mutex
	calls []*call
}

func (r *recorder) begin(c *call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

// finish completes c under the lock, so that snapshot never sees half a call.
func (r *recorder) finish(c *call, fill func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fill()
	c.End = time.Now()
}

// snapshot returns copies of the calls so far.
func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]call, len(r.calls))
	for i, c := range r.calls {
		out[i] = *c
	}
	return out
}

// writeCalls writes the calls as JSON lines to path, for a person to read
// what the worker did.
func writeCalls(path string, calls []call) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write the recorded calls: %w", err)
	}
	enc := json.NewEncoder(f)
	for _, c := range calls {
		line := struct {
			Start  string             `json:"start"`
			End    string             `json:"end,omitempty"`
			Method string             `json:"method"`
			URL    string             `json:"url"`
			Status int                `json:"status"`
			Code   string             `json:"code,omitempty"`
			Fault  string             `json:"injected,omitempty"`
			Hidden string             `json:"hiddenActivation,omitempty"`
			Commit *api.CommitRequest `json:"commit,omitempty"`
			View   *api.View          `json:"view,omitempty"`
		}{Start: clock(c.Start), Method: c.Method, URL: c.Path, Status: c.Status, Code: c.Code, Fault: c.Fault, Hidden: c.Hidden, Commit: c.Commit, View: c.View}
		if q := c.Query.Encode(); q != "" {
			line.URL += "?" + q
		}
		if !c.End.IsZero() {
			line.End = clock(c.End)
		}
		if err := enc.Encode(line); err != nil {
			_ = f.Close()
			return fmt.Errorf("write the recorded calls: %w", err)
		}
	}
	return f.Close()
}

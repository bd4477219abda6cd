package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
)

// proxy stands between the worker and its agent's API. It records every
// call, and answers chosen calls with a fault instead of the agent, so that
// the worker's reaction can be checked from the agent's side. Everything
// else goes to the real agent unchanged.
type proxy struct {
	target string // the agent's base URL (http://localhost for a socket)
	url    string // the proxy's, as the worker takes it
	hc     *http.Client
	rec    *recorder
	srv    *http.Server
	ln     net.Listener
	served chan error // Serve's end, once started

	mu     sync.Mutex
	armed  []*fault
	refuse map[string]uint64            // task → epoch whose commits are refused with not_owner
	resume map[string][]byte            // task → the commit body refused with resume
	hide   *hiding                      // the activation the worker is not shown, if armed
	polls  map[*call]context.CancelFunc // the polls being forwarded
	kicked map[*call]bool
}

// fault is one armed fault: the next call of kind (for task, unless empty)
// is answered with what.
type fault struct {
	kind, task, what string
	fired            chan *call // gets the call the fault was answered to
}

// hiding hides the activation of one task from the worker: the first of
// candidates that a view shows active is shown as a learner instead, until
// a view revokes it. The worker is then asked to release a task it never
// started.
type hiding struct {
	candidates []string
	task       string
	epoch      uint64
	done       bool
}

// newProxy listens on listen (host:port, or unix:PATH) for the worker and
// forwards to the agent at target (http://HOST:PORT, or unix:PATH).
func newProxy(target, listen string, rec *recorder) (*proxy, error) {
	network, addr := "tcp", listen
	if path, ok := api.SocketPath(listen); ok {
		network, addr = "unix", path
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("listen for the proxy: %w", err)
	}
	transport := client.NewTransport(target)
	transport.MaxIdleConnsPerHost = 64
	url := "http://" + ln.Addr().String()
	if network == "unix" {
		url = listen
	}
	if _, ok := api.SocketPath(target); ok {
		target = "http://localhost"
	}
	p := &proxy{
		target: target,
		url:    url,
		hc:     &http.Client{Transport: transport},
		rec:    rec,
		ln:     ln,
		refuse: map[string]uint64{},
		resume: map[string][]byte{},
		polls:  map[*call]context.CancelFunc{},
		kicked: map[*call]bool{},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	return p, nil
}

// URL is the proxy's address as the worker takes it: its SIDECAR_URL.
func (p *proxy) URL() string { return p.url }

// start serves in a goroutine until close.
func (p *proxy) start() {
	p.served = make(chan error, 1)
	go func() { p.served <- p.srv.Serve(p.ln) }()
}

// close stops serving, cutting calls still open after a second (a hung
// one), and waits for the server to end.
func (p *proxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if p.srv.Shutdown(ctx) != nil {
		_ = p.srv.Close()
	}
	if p.served != nil {
		<-p.served
	} else {
		_ = p.ln.Close()
	}
}

// arm makes the next call of kind (for task, unless empty) get fault what.
// The returned channel gets that call once it is answered.
func (p *proxy) arm(kind, task, what string) <-chan *call {
	f := &fault{kind: kind, task: task, what: what, fired: make(chan *call, 1)}
	p.mu.Lock()
	p.armed = append(p.armed, f)
	p.mu.Unlock()
	return f.fired
}

// hideNext hides the next activation of one of candidates (see hiding).
func (p *proxy) hideNext(candidates []string) {
	p.mu.Lock()
	p.hide = &hiding{candidates: candidates}
	p.mu.Unlock()
}

// hidden returns the task and epoch whose activation was hidden, if any.
func (p *proxy) hidden() (string, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hide == nil {
		return "", 0
	}
	return p.hide.task, p.hide.epoch
}

// classify names the kind of call and its task.
func classify(r *http.Request) (kind, task string) {
	path := r.URL.Path
	if path == "/assignment" && r.Method == http.MethodGet {
		return callAssignment, ""
	}
	if rest, ok := strings.CutPrefix(path, "/tasks/"); ok && r.Method == http.MethodPost {
		id, what, _ := strings.Cut(rest, "/")
		switch what {
		case "commit":
			return callCommit, id
		case "release":
			return callRelease, id
		}
	}
	return callOther, ""
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind, task := classify(r)
	c := &call{Kind: kind, Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Task: task, Start: time.Now()}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, "read the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if kind == callCommit {
		c.Body = body
		if req, ok := decodeCommit(r.Header.Get("Content-Type"), body); ok {
			c.Commit = &req
		}
	}
	p.rec.begin(c)

	status, header, out, f, hidden := p.answer(r, c, body)
	abandoned := f != nil && f.what == faultHang && status == 0
	for _, h := range []string{"Content-Type", "Retry-After", "Allow", "WWW-Authenticate", "Cache-Control"} {
		if v := header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	if status != 0 {
		w.WriteHeader(status)
		_, _ = w.Write(out)
	}

	var view *api.View
	if kind == callAssignment && status == http.StatusOK {
		view = new(api.View)
		if json.Unmarshal(out, view) != nil {
			view = nil
		}
	}
	p.rec.finish(c, func() {
		c.Status = status
		if status >= 300 {
			var eb api.ErrorBody
			if json.Unmarshal(out, &eb) == nil {
				c.Code = eb.Code
			}
		}
		c.View, c.Hidden, c.Abandoned = view, hidden, abandoned
		if f != nil {
			c.Fault = f.what
		}
	})
	if f != nil {
		f.fired <- c
	}
}

// decodeCommit reads a commit's body in the form its Content-Type says:
// the binary form, or JSON. The proxy records what the worker sent; the
// agent judges whether it is valid.
func decodeCommit(contentType string, body []byte) (api.CommitRequest, bool) {
	if mt, _, _ := strings.Cut(contentType, ";"); strings.TrimSpace(mt) == api.MediaBinary {
		req, err := api.DecodeCommitBinary(body)
		return req, err == nil
	}
	var req api.CommitRequest
	return req, json.Unmarshal(body, &req) == nil
}

// answer finds what to answer to c: a fault, or the agent's answer.
// The call's fields are the recorder's: answer only reads them.
func (p *proxy) answer(r *http.Request, c *call, body []byte) (status int, header http.Header, out []byte, f *fault, hidden string) {
	f, persistent := p.take(c)
	switch {
	case persistent != "":
		status, header, out, _ = errorAnswer(persistent, "")
		return status, header, out, nil, ""
	case f != nil && f.what == faultHang:
		select {
		case <-r.Context().Done():
			return 0, http.Header{}, nil, f, "" // the worker gave up: nobody reads an answer
		case <-time.After(hangMax):
			status, header, out, _ = errorAnswer(faultUnavailable, "the conformance run left this call unanswered for "+hangMax.String()+", as a paused agent would; give every call a timeout")
			return status, header, out, f, ""
		}
	case f != nil && f.what != faultResume:
		status, header, out, _ = errorAnswer(f.what, "")
		return status, header, out, f, ""
	}
	status, header, out, err := p.forward(r, c, body)
	if err != nil && p.wasKicked(c) {
		if f, _ := p.take(c); f != nil {
			status, header, out, _ = errorAnswer(f.what, "")
			return status, header, out, f, ""
		}
		status, header, out, err = p.forward(r, c, body)
	}
	if err != nil {
		status, header, out, _ = errorAnswer(faultUnavailable, "the conformance proxy could not reach the agent: "+err.Error())
		return status, header, out, nil, ""
	}
	if f != nil { // resume
		if status != http.StatusOK {
			p.mu.Lock()
			p.armed = append([]*fault{f}, p.armed...) // try again on the next commit
			p.mu.Unlock()
			return status, header, out, nil, ""
		}
		p.mu.Lock()
		p.resume[c.Task] = body
		p.mu.Unlock()
		status, header, out, _ = errorAnswer(faultResume, "")
		return status, header, out, f, ""
	}
	if c.Kind == callAssignment && status == http.StatusOK {
		out, hidden = p.rewriteView(out)
	}
	return status, header, out, nil, hidden
}

// take consumes the armed fault that matches c, and says whether c must be
// refused because of an earlier fault (a commit after not_owner, or the
// very commit refused with resume).
func (p *proxy) take(c *call) (f *fault, persistent string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.Kind == callCommit {
		if e, ok := p.refuse[c.Task]; ok && (c.Commit == nil || c.Commit.Epoch == e || c.Commit.Epoch == 0) {
			return nil, faultNotOwner
		}
		if b, ok := p.resume[c.Task]; ok && bytes.Equal(b, c.Body) {
			return nil, faultResume
		}
	}
	for i, a := range p.armed {
		if a.kind == c.Kind && (a.task == "" || a.task == c.Task) {
			p.armed = slices.Delete(p.armed, i, i+1)
			if a.what == faultNotOwner && c.Commit != nil {
				p.refuse[c.Task] = c.Commit.Epoch
			}
			return a, ""
		}
	}
	return nil, ""
}

// kickPolls cuts the polls being forwarded short, so that a fault armed
// for the next poll is answered to the one the worker has open.
func (p *proxy) kickPolls() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, cancel := range p.polls {
		p.kicked[c] = true
		cancel()
	}
}

func (p *proxy) wasKicked(c *call) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kicked[c]
}

func (p *proxy) forward(r *http.Request, c *call, body []byte) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if c.Kind == callAssignment {
		p.mu.Lock()
		p.polls[c] = cancel
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.polls, c)
			p.mu.Unlock()
		}()
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header = r.Header.Clone()
	resp, err := p.hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, out, nil
}

// rewriteView hides the armed activation from a view.
func (p *proxy) rewriteView(out []byte) ([]byte, string) {
	var v api.View
	if json.Unmarshal(out, &v) != nil {
		return out, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	hidden := ""
	if h := p.hide; h != nil && !h.done {
		for i, tv := range v.Tasks {
			revoked := slices.Contains(v.Revoke, tv.ID)
			if h.task == "" && tv.Role == api.RoleActive && !revoked && slices.Contains(h.candidates, tv.ID) {
				h.task, h.epoch = tv.ID, tv.Epoch
			}
			if tv.ID != h.task || h.task == "" {
				continue
			}
			if revoked || tv.Epoch != h.epoch || tv.Role != api.RoleActive {
				h.done = true
				continue
			}
			v.Tasks[i] = api.TaskView{ID: tv.ID, Role: api.RoleLearner, Stateful: tv.Stateful, Epoch: tv.Epoch}
			hidden = tv.ID
		}
	}
	if hidden == "" {
		return out, ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return out, ""
	}
	return append(b, '\n'), hidden
}

// errorAnswer is the agent's answer for code, as the proxy gives it.
func errorAnswer(code, msg string) (int, http.Header, []byte, *fault) {
	status := map[string]int{faultUnavailable: http.StatusServiceUnavailable, faultNotOwner: http.StatusConflict, faultResume: http.StatusConflict}[code]
	if msg == "" {
		msg = map[string]string{
			faultUnavailable: "temporarily unavailable (injected by handoff conformance); retry",
			faultNotOwner:    "this member is not the task's active owner (injected by handoff conformance); stop the task without releasing it",
			faultResume:      "the agent holds a commit of this task the worker was not told of (injected by handoff conformance); restart the task from the checkpoint in /assignment and do not retry this commit",
		}[code]
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	if status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	b, _ := json.Marshal(api.ErrorBody{Code: code, Message: msg})
	return status, h, append(b, '\n'), nil
}

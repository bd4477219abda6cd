// Package client is a small Go client of the handoff sidecar's HTTP API for
// workers written in Go, and a runner (Run) that follows the member's
// assignment: it starts a function per active task, stops it when the task
// is revoked, and releases the task once the function made its last commit.
package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/handoffhq/handoff/api"
)

// Error is an error answer of the API. Match it with errors.Is against the
// sentinels below (or api's), or with errors.As to read its fields.
type Error struct {
	Status  int    // HTTP status
	Code    string // stable code, such as "not_owner" (api.Code*)
	Message string // what happened and what to do, for people
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("handoff api: %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("handoff api: %s (%d %s)", e.Message, e.Status, e.Code)
}

// Is matches another *Error with the same code (the sentinels below), and
// the api sentinel of the code, so errors.Is(err, api.ErrNotOwner)
// holds too.
func (e *Error) Is(target error) bool {
	if t, ok := target.(*Error); ok {
		return t.Code != "" && t.Code == e.Code
	}
	return codeSentinels[e.Code] == target && target != nil
}

// Sentinels for the codes workers branch on.
var (
	// ErrNotOwner: this member is not (or no longer) the task's active
	// owner, or the commit's epoch is stale. Stop processing the task.
	ErrNotOwner = &Error{Code: api.CodeNotOwner}
	// ErrNotFound: the key does not exist (Get).
	ErrNotFound = &Error{Code: api.CodeNotFound}
	// ErrUnknownTask: the task is not one of the group's tasks.
	ErrUnknownTask = &Error{Code: api.CodeUnknownTask}
	// ErrNotRevoked: a release of a task that is not being revoked.
	ErrNotRevoked = &Error{Code: api.CodeNotRevoked}
	// ErrUnavailable: the agent is not ready or shutting down; retry.
	ErrUnavailable = &Error{Code: api.CodeUnavailable}
	// ErrResume: the commit was refused because the agent holds a newer
	// commit of this task than the worker knows of; don't retry it, restart
	// the task from the checkpoint in the view (Run does).
	ErrResume = &Error{Code: api.CodeResume}
)

var codeSentinels = map[string]error{
	api.CodeInvalid:     api.ErrInvalid,
	api.CodeTooLarge:    api.ErrTooLarge,
	api.CodeUnknownTask: api.ErrUnknownTask,
	api.CodeNotFound:    api.ErrNotFound,
	api.CodeNotOwner:    api.ErrNotOwner,
	api.CodeNotRevoked:  api.ErrNotRevoked,
	api.CodeResume:      api.ErrResume,
	api.CodeUnavailable: api.ErrUnavailable,
}

// DefaultCallTimeout bounds each call (a long-poll: its wait plus this)
// unless the caller's context ends sooner. A paused agent accepts
// connections and never answers: without a bound, a worker would hang
// with it.
const DefaultCallTimeout = 10 * time.Second

// Client calls one agent's API. It is safe for concurrent use and reuses
// connections; one Client per agent is enough.
//
// It sends commits and batch gets, and asks for batch gets' and scans'
// answers, in the API's binary form (api.MediaBinary): keys and values
// travel as they are, not in base64. WithJSON makes it speak JSON.
type Client struct {
	base    string // without a trailing slash
	socket  string // the agent's Unix socket, for a unix: URL
	token   string
	hc      *http.Client
	timeout time.Duration
	json    bool
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer token" (the agent's --token).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithCallTimeout replaces DefaultCallTimeout.
func WithCallTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithJSON makes the client send and receive JSON bodies only, as a worker
// in another language would: slower, but readable on the wire.
func WithJSON() Option { return func(c *Client) { c.json = true } }

// WithHTTPClient replaces the HTTP client. It must not have a Timeout
// shorter than the long-polls it will carry; bound calls with contexts.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a client of the agent at baseURL: "http://127.0.0.1:7070",
// or "unix:/run/handoff/api.sock" for an agent listening on a Unix socket
// (its --listen unix:PATH), which the client calls as http://localhost.
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), timeout: DefaultCallTimeout}
	if path, ok := api.SocketPath(baseURL); ok {
		c.base, c.socket = "http://localhost", path
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: NewTransport(baseURL)}
	}
	return c
}

// NewTransport returns the HTTP transport New uses for baseURL: no proxy,
// enough idle connections that a worker with many tasks (a long-poll plus
// commits and reads per task) does not reconnect between calls, and for a
// unix: URL, every connection to its socket.
func NewTransport(baseURL string) *http.Transport {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	if path, ok := api.SocketPath(baseURL); ok {
		dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", path)
		}
	}
	return &http.Transport{
		Proxy:               nil, // the agent is local; never go through a proxy
		DialContext:         dial,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false,
	}
}

// Assignment returns the member's view. With wait > 0 it long-polls: it
// answers as soon as the view's Version exceeds after, or with the current
// view once wait (capped by the agent) has passed. The call gives up wait
// plus the call timeout after it began.
func (c *Client) Assignment(ctx context.Context, after uint64, wait time.Duration) (api.View, error) {
	q := url.Values{}
	if wait > 0 {
		q.Set("wait", wait.String())
		q.Set("after", strconv.FormatUint(after, 10))
	}
	ctx, cancel := context.WithTimeout(ctx, wait+c.timeout)
	defer cancel()
	var v api.View
	err := c.send(ctx, http.MethodGet, "/assignment", q, body{}, &v)
	return v, err
}

// Commit atomically applies req to task's state. It fails with ErrNotOwner
// when this member is not (or no longer) the task's active owner or when
// req.Epoch is stale.
func (c *Client) Commit(ctx context.Context, task string, req api.CommitRequest) (api.CommitResult, error) {
	b := body{media: api.MediaBinary}
	if c.json {
		var err error
		if b.data, err = json.Marshal(req); err != nil {
			return api.CommitResult{}, fmt.Errorf("encode commit of task %s: %w", task, err)
		}
		b.media = api.MediaJSON
	} else {
		b.data = api.AppendCommitBinary(nil, req)
	}
	var res api.CommitResult
	err := c.do(ctx, http.MethodPost, taskPath(task, "commit"), nil, b, &res)
	return res, err
}

// Release tells the agent that the worker stopped the revoked task and made
// its last commit, so that the hand-off may proceed. epoch, when not 0, is
// the ownership the worker stopped: the agent refuses (ErrNotOwner) to
// release the task at any other epoch.
func (c *Client) Release(ctx context.Context, task string, epoch uint64) (api.ReleaseResult, error) {
	var q url.Values
	if epoch != 0 {
		q = url.Values{"epoch": {strconv.FormatUint(epoch, 10)}}
	}
	var res api.ReleaseResult
	err := c.do(ctx, http.MethodPost, taskPath(task, "release"), q, body{}, &res)
	return res, err
}

// Get returns the value of key in task's state, or an error matching
// ErrNotFound if the key does not exist. The key may be any bytes.
func (c *Client) Get(ctx context.Context, task string, key []byte) ([]byte, error) {
	var val []byte
	err := c.do(ctx, http.MethodGet, taskPath(task, "state")+"/"+url.PathEscape(string(key)), nil, body{}, &val)
	return val, err
}

// GetMany returns the values of keys in task's state, in their order: nil
// for a key that does not exist, the value (maybe empty) for one that
// does. The agent reads each request's keys at one point in time; more
// than api.DefaultMaxGetKeys keys go in several requests, each read at
// its own.
func (c *Client) GetMany(ctx context.Context, task string, keys [][]byte) ([][]byte, error) {
	out := make([][]byte, 0, len(keys))
	for len(keys) > 0 {
		n := min(len(keys), api.DefaultMaxGetKeys)
		vals, err := c.getMany(ctx, task, keys[:n])
		if err != nil {
			return nil, err
		}
		if len(vals) != n {
			return nil, fmt.Errorf("get %d keys of task %s: the agent answered %d values", n, task, len(vals))
		}
		out = append(out, vals...)
		keys = keys[n:]
	}
	return out, nil
}

// getMany is one POST /tasks/{id}/get.
func (c *Client) getMany(ctx context.Context, task string, keys [][]byte) ([][]byte, error) {
	path := taskPath(task, "get")
	if c.json {
		data, err := json.Marshal(api.GetRequest{Keys: keys})
		if err != nil {
			return nil, fmt.Errorf("encode get of task %s: %w", task, err)
		}
		var res api.GetResult
		err = c.do(ctx, http.MethodPost, path, nil, body{media: api.MediaJSON, data: data}, &res)
		return res.Values, err
	}
	var raw binaryAnswer
	b := body{media: api.MediaBinary, data: api.AppendGetBinary(nil, keys), accept: api.MediaBinary}
	if err := c.do(ctx, http.MethodPost, path, nil, b, &raw); err != nil {
		return nil, err
	}
	vals, err := api.DecodeValuesBinary(raw)
	if err != nil {
		return nil, fmt.Errorf("POST %s: decode answer: %w", path, err)
	}
	return vals, nil
}

// Scan returns task's keys and values in key order, from o.Start on,
// restricted to o.Prefix, at most o.Limit of them (all if o.Limit <= 0). It
// reads as many pages as it needs.
func (c *Client) Scan(ctx context.Context, task string, o api.ScanOptions) ([]api.KV, error) {
	var out []api.KV
	start := o.Start
	for {
		q := url.Values{}
		if len(o.Prefix) > 0 {
			q.Set("prefix_b64", b64(o.Prefix))
		}
		if len(start) > 0 {
			q.Set("start_b64", b64(start))
		}
		if o.Limit > 0 {
			q.Set("limit", strconv.Itoa(o.Limit-len(out)))
		}
		page, err := c.scanPage(ctx, task, q)
		if err != nil {
			return out, err
		}
		out = append(out, page.Items...)
		if page.Next == nil || (o.Limit > 0 && len(out) >= o.Limit) {
			return out, nil
		}
		start = page.Next
	}
}

// scanPage is one GET /tasks/{id}/state.
func (c *Client) scanPage(ctx context.Context, task string, q url.Values) (api.ScanResult, error) {
	path := taskPath(task, "state")
	var page api.ScanResult
	if c.json {
		err := c.do(ctx, http.MethodGet, path, q, body{}, &page)
		return page, err
	}
	var raw binaryAnswer
	if err := c.do(ctx, http.MethodGet, path, q, body{accept: api.MediaBinary}, &raw); err != nil {
		return page, err
	}
	page, err := api.DecodeScanBinary(raw)
	if err != nil {
		return page, fmt.Errorf("GET %s: decode answer: %w", path, err)
	}
	return page, nil
}

// Leave starts a graceful leave of the member (idempotent) and returns its
// progress. Keep following Assignment: it says shutdown once the member's
// tasks are handed over.
func (c *Client) Leave(ctx context.Context) (api.LeaveStatus, error) {
	var st api.LeaveStatus
	err := c.do(ctx, http.MethodPost, "/leave", nil, body{}, &st)
	return st, err
}

// LeaveStatus returns the progress of the member's leave.
func (c *Client) LeaveStatus(ctx context.Context) (api.LeaveStatus, error) {
	var st api.LeaveStatus
	err := c.do(ctx, http.MethodGet, "/leave", nil, body{}, &st)
	return st, err
}

// Group returns the whole group's view, with learners' progress.
func (c *Client) Group(ctx context.Context) (api.GroupView, error) {
	var g api.GroupView
	err := c.do(ctx, http.MethodGet, "/group", nil, body{}, &g)
	return g, err
}

// Ready returns nil once the agent has joined its group; otherwise an error
// matching ErrUnavailable whose message says why not.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, body{}, nil)
}

func taskPath(task, what string) string {
	return "/tasks/" + url.PathEscape(task) + "/" + what
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// body is what a request sends (data of media type; no data: no body) and
// the media type it asks the answer in (accept; empty: JSON).
type body struct {
	media  string
	data   []byte
	accept string
}

// binaryAnswer receives an answer's bytes as they are, for a binary form
// the caller decodes.
type binaryAnswer []byte

// do sends one request, bounded by the call timeout, and decodes a 2xx
// answer into out: JSON, or the raw body when out is *[]byte or
// *binaryAnswer. Other answers become *Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, b body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.send(ctx, method, path, q, b, out)
}

// send is do without a bound of its own.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, b body, out any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if b.data != nil {
		rd = bytes.NewReader(b.data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if b.data != nil {
		req.Header["Content-Type"] = []string{b.media}
	}
	if b.accept != "" {
		req.Header["Accept"] = []string{b.accept}
	}
	if c.token != "" {
		req.Header["Authorization"] = []string{"Bearer " + c.token}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := readAnswer(resp)
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return decodeError(resp.StatusCode, data)
	}
	switch out := out.(type) {
	case nil:
		return nil
	case *[]byte:
		*out = data
		return nil
	case *binaryAnswer:
		if ct := resp.Header.Get("Content-Type"); ct != api.MediaBinary {
			return fmt.Errorf("%s %s: the agent answered %q, not the binary form %s it was asked for (is it older than this client? use client.WithJSON)", method, path, ct, api.MediaBinary)
		}
		*out = data
		return nil
	default:
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
		return nil
	}
}

// readAnswer reads an answer's body into one buffer of its declared length.
func readAnswer(resp *http.Response) ([]byte, error) {
	n := resp.ContentLength
	if n < 0 || n > 64<<20 {
		return io.ReadAll(resp.Body)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

func decodeError(status int, data []byte) error {
	var body api.ErrorBody
	if err := json.Unmarshal(data, &body); err == nil && body.Code != "" {
		return &Error{Status: status, Code: body.Code, Message: body.Message}
	}
	// Not the agent's JSON (a proxy, another server on the port).
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Status: status, Message: msg}
}

// isCode reports whether err is an API error with one of codes.
func isCode(err error, codes ...string) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	for _, c := range codes {
		if e.Code == c {
			return true
		}
	}
	return false
}

package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/rs/zerolog"
)

// Admission. The API listens where any local program can reach it, and
// connections and requests are bounded so that such programs cannot
// exhaust the agent; the bounds must not shut the worker out, whatever
// other clients do. So:
//
//   - Every connection is accepted at once, none waits in the kernel's
//     queue. At MaxConns open connections, a new one takes the place of the
//     oldest that was answered and only waits to be closed, else of the
//     oldest whose request body is stalled, else of the oldest whose
//     request headers are stalled (slow headers, or none yet), else of the
//     oldest one idle for a second or longer; when every connection is
//     busy with a request that passed the token check, has a request the
//     agent has yet to read, or was idle for less than a second, the new
//     one is answered 503 and closed. The worker's requests arrive whole
//     within moments, so a flood of slow clients evicts itself, not the
//     worker; and a connection the worker keeps alive between its calls is
//     not cut off as the next call goes out on it (a closed connection
//     fails a POST that was sent on it, and clients do not resend POSTs),
//     while a new connection refused with 503 is retried.
//   - Long-polls (GET /assignment?wait=) have their own cap, MaxLongPolls:
//     past it, the oldest one answers at once with the current view (its
//     client polls again, as after any answer).
//   - A request body that passed the token check is read whole before
//     its request is admitted, and bodies still arriving have their own
//     cap, as many as MaxRequests: past it, a new body takes the place of
//     the oldest one that is stalled (its reader waits for the client's
//     next bytes), whose connection is closed, whatever the number of
//     connections. A slow body so holds a connection and at most what it
//     has sent, never a request slot. The worker's bodies arrive whole
//     within moments, so reading them never waits for the client and
//     they are not cut off, however many others arrive meanwhile.
//   - Other requests that passed the token check, and those whose body is
//     in, count against MaxRequests while they run: past it, a request
//     is answered 503 unavailable at once, with Retry-After, instead of
//     waiting.
//
// Without a token, a local program that sends complete requests is as good
// as the worker: it can keep MaxRequests busy (the worker then gets prompt
// 503s) and take turns with the worker's long-poll. With --api-token it
// cannot: its requests stop at the token check and its connections are
// the first evicted.

// Defaults of the admission bounds (Options).
const (
	// DefaultMaxConns is how many connections the API keeps open at once.
	DefaultMaxConns = 512
	// DefaultMaxRequests is how many requests other than long-polls run
	// at once.
	DefaultMaxRequests = 256
	// DefaultMaxLongPolls is how many long-polls of GET /assignment wait
	// at once.
	DefaultMaxLongPolls = 64
)

// idleGrace is how long a connection stays idle between two requests
// before a new connection may take its place at the connection cap.
const idleGrace = time.Second

// admission tracks the API's connections, long-polls and requests in
// flight. It is safe for concurrent use.
type admission struct {
	maxConns, maxRequests, maxLongPolls int
	log                                 zerolog.Logger

	mu       sync.Mutex
	conns    []*trackedConn // open connections, oldest first
	polls    []*waitingPoll // waiting long-polls, oldest first
	reading  []*trackedConn // connections whose admitted body is arriving, oldest first
	requests int            // admitted requests other than long-polls
	accepted uint64

	// warnedAt rate-limits the log line about evictions and refusals.
	warnedAt   atomic.Int64
	suppressed atomic.Int64
}

func newAdmission(o Options) *admission {
	return &admission{maxConns: o.MaxConns, maxRequests: o.MaxRequests, maxLongPolls: o.MaxLongPolls, log: o.Logger}
}

// trackedConn is a connection the admission tracks. Its fields from
// idle on are guarded by admission.mu; waiting, bodyFrom and admitted are
// atomic.
type trackedConn struct {
	net.Conn
	a         *admission
	seq       uint64 // accept order
	closeOnce sync.Once
	// waiting is set while a read waits for the client's bytes.
	waiting atomic.Bool

	// bodyFrom is when the body being read began (Unix ns), 0 when none
	// is; admitted is set once its current request arrived whole and
	// passed the token check. Both change without the admission's lock:
	// they must not wait for an eviction that holds it, for by then
	// net/http reads the connection in the background (from the start
	// of a request without a body, from the end of a body), and the
	// connection, waiting for the client's bytes, would look like one
	// whose body or headers stall to the eviction, which would cut off
	// the worker's request.
	bodyFrom atomic.Int64
	admitted atomic.Bool

	idle      bool      // between two requests
	idleSince time.Time // when it last became idle
	closing   bool      // answered, and only waits to be closed
	gone      bool      // closed and removed
}

func (c *trackedConn) Read(p []byte) (int, error) {
	c.waiting.Store(true)
	n, err := c.Conn.Read(p)
	c.waiting.Store(false)
	return n, err
}

// stalledLocked tells whether c is sending a body and its reader waits
// for the body's next bytes.
func (c *trackedConn) stalledLocked() bool { return c.bodyFrom.Load() != 0 && c.waiting.Load() }

// CloseWrite is how net/http ends a connection whose request body it will
// not read (a 408, a 413): it half-closes it, then waits half a second for
// the client to read the answer before it closes it. The connection is
// then the first a new one replaces.
func (c *trackedConn) CloseWrite() error {
	c.a.mu.Lock()
	c.closing = true
	c.a.mu.Unlock()
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() { c.a.remove(c) })
	return err
}

// listener wraps ln so that its connections are tracked and bounded.
func (a *admission) listener(ln net.Listener) net.Listener {
	return &admittingListener{Listener: ln, a: a}
}

type admittingListener struct {
	net.Listener
	a *admission
}

func (l *admittingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.a.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// admit tracks a new connection, evicting another at the cap; it returns
// nil (having answered 503 and closed c) when every connection is busy.
func (a *admission) admit(c net.Conn) *trackedConn {
	a.mu.Lock()
	var victim *trackedConn
	if len(a.conns) >= a.maxConns {
		victim = a.victimLocked()
		if victim == nil {
			a.mu.Unlock()
			a.warn("refused a connection: every connection is busy with an admitted request")
			refuse(c)
			return nil
		}
		a.removeLocked(victim)
	}
	a.accepted++
	tc := &trackedConn{Conn: c, a: a, seq: a.accepted}
	a.conns = append(a.conns, tc)
	a.mu.Unlock()
	if victim != nil {
		a.warn("closed the oldest connection that had no admitted request in progress, to make room for a new one")
		_ = victim.Close()
	}
	return tc
}

// victimLocked picks the connection a new one replaces: the oldest that
// was answered and only waits to be closed, else the oldest whose body is
// stalled, else the oldest whose request headers are stalled (the agent
// waits for their next bytes, or for a first one), else the oldest one
// idle for idleGrace or longer; nil if all are busy with admitted requests
// or with requests the agent has yet to read, or were idle for less.
// Stalled bodies go before stalled headers, and a request that is there to
// read is never cut off, so that a flood does not replace the worker's new
// connections before their requests are in; nor a connection that has just
// served a request, which its client may be reusing at this moment.
func (a *admission) victimLocked() *trackedConn {
	now := time.Now()
	for _, pick := range []func(*trackedConn) bool{
		func(c *trackedConn) bool { return c.closing },
		(*trackedConn).stalledLocked,
		// Not one whose request the agent has not read yet: the
		// worker's new connection, for one, whose request is there.
		func(c *trackedConn) bool { return !c.idle && !c.admitted.Load() && c.waiting.Load() },
		func(c *trackedConn) bool { return c.idle && now.Sub(c.idleSince) >= idleGrace },
	} {
		for _, c := range a.conns { // oldest first
			if pick(c) {
				return c
			}
		}
	}
	return nil
}

func (a *admission) remove(c *trackedConn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.removeLocked(c)
}

func (a *admission) removeLocked(c *trackedConn) {
	if c.gone {
		return
	}
	c.gone = true
	for i, o := range a.conns {
		if o == c {
			a.conns = append(a.conns[:i], a.conns[i+1:]...)
			break
		}
	}
}

// refuse answers 503 on a connection the API has no room for, and closes
// it.
func refuse(c net.Conn) {
	const body = `{"code":"unavailable","message":"the agent's API has no room for another connection (every one is busy with a request); retry"}` + "\n"
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"+
		fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body))+body)
	_ = c.Close()
}

// connState is the http.Server's ConnState hook: it follows which
// connections are idle.
func (a *admission) connState(c net.Conn, st http.ConnState) {
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	switch st {
	case http.StateIdle, http.StateActive:
		// A new request starts unadmitted, so that a client cannot send
		// one whole request and then hold its connection with slow
		// headers.
		a.mu.Lock()
		tc.idle = st == http.StateIdle
		if tc.idle {
			tc.idleSince = time.Now()
		}
		tc.admitted.Store(false)
		a.mu.Unlock()
	case http.StateHijacked, http.StateClosed:
		tc.closeOnce.Do(func() { a.remove(tc) })
	}
}

type connKey struct{}

// connContext is the http.Server's ConnContext hook: it lets a request
// find its connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

func requestConn(r *http.Request) *trackedConn {
	tc, _ := r.Context().Value(connKey{}).(*trackedConn)
	return tc
}

// admitted marks r's connection as serving an admitted request (whole, past
// the token check): until the request ends, the connection is replaced
// only while it is still sending its body.
func (a *admission) admitted(r *http.Request) {
	if tc := requestConn(r); tc != nil {
		tc.admitted.Store(true)
	}
}

// bodyStarted and bodyDone bracket the reading of r's body. Neither takes
// the admission's lock (trackedConn.bodyFrom says why).
func (a *admission) bodyStarted(r *http.Request) {
	if tc := requestConn(r); tc != nil {
		tc.bodyFrom.Store(time.Now().UnixNano())
	}
}

func (a *admission) bodyDone(r *http.Request) {
	if tc := requestConn(r); tc != nil {
		tc.bodyFrom.Store(0)
	}
}

// trackedBody clears its connection's body mark once the body has been
// read to its end, failed, or been closed.
type trackedBody struct {
	io.ReadCloser
	done func()
	once sync.Once
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.once.Do(b.done)
	}
	return n, err
}

func (b *trackedBody) Close() error {
	b.once.Do(b.done)
	return b.ReadCloser.Close()
}

// waitingPoll is one waiting long-poll; cut ends its wait.
type waitingPoll struct{ cut context.CancelFunc }

// beginLongPoll registers a long-poll; at the cap, the oldest one is cut
// short. The returned context ends when this one is cut; call end when
// the poll is over.
func (a *admission) beginLongPoll(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	p := &waitingPoll{cut: cancel}
	a.mu.Lock()
	var oldest *waitingPoll
	if len(a.polls) >= a.maxLongPolls {
		oldest = a.polls[0]
		a.polls = a.polls[1:]
	}
	a.polls = append(a.polls, p)
	a.mu.Unlock()
	if oldest != nil {
		oldest.cut()
	}
	return ctx, func() {
		a.mu.Lock()
		for i, o := range a.polls {
			if o == p {
				a.polls = append(a.polls[:i], a.polls[i+1:]...)
				break
			}
		}
		a.mu.Unlock()
		cancel()
	}
}

// beginBody registers r's connection as sending the body of an admitted
// request; at MaxRequests bodies arriving, the oldest stalled one is cut
// off (its connection closed) to make room. Bodies whose bytes are there
// to read are never cut off: with none stalled, this one is read beyond
// the cap. Call the returned func once the body is in or has failed.
func (a *admission) beginBody(r *http.Request) (end func()) {
	tc := requestConn(r)
	if tc == nil { // a test's recorder: the body is in memory
		return func() {}
	}
	a.mu.Lock()
	var stalled *trackedConn
	if len(a.reading) >= a.maxRequests {
		for i, c := range a.reading {
			if c.stalledLocked() {
				stalled = c
				a.reading = append(a.reading[:i], a.reading[i+1:]...)
				break
			}
		}
	}
	a.reading = append(a.reading, tc)
	a.mu.Unlock()
	if stalled != nil {
		a.warn("closed the oldest connection whose body had stalled, to read a new one's")
		_ = stalled.Close()
	}
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		for i, o := range a.reading {
			if o == tc {
				a.reading = append(a.reading[:i], a.reading[i+1:]...)
				break
			}
		}
	}
}

// beginRequest takes a request slot; ok is false at the cap. Call the
// returned func when the request is over.
func (a *admission) beginRequest() (end func(), ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.requests >= a.maxRequests {
		return nil, false
	}
	a.requests++
	return func() {
		a.mu.Lock()
		a.requests--
		a.mu.Unlock()
	}, true
}

// warn logs msg at most once per 10 s, with how many were left out.
func (a *admission) warn(msg string) {
	now := time.Now().UnixNano()
	last := a.warnedAt.Load()
	if now-last < int64(10*time.Second) || !a.warnedAt.CompareAndSwap(last, now) {
		a.suppressed.Add(1)
		return
	}
	a.log.Warn().Int64("suppressed", a.suppressed.Swap(0)).Int("maxConns", a.maxConns).Msg("http api: " + msg)
}

// isLongPoll tells whether r is a GET /assignment that may wait.
func isLongPoll(r *http.Request) bool {
	if r.Method != http.MethodGet || r.URL.Path != "/assignment" {
		return false
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return false
	}
	w := q.Get("wait")
	if w == "" {
		return false
	}
	d, err := time.ParseDuration(w)
	return err == nil && d > 0 // a bad wait is answered 400 at once
}

// admitRequests bounds the requests that passed the token check: a
// long-poll takes a long-poll slot (cutting the oldest one short at the
// cap); any other request has its body read first, if it has one, and
// then takes a request slot or gets a prompt 503.
func (s *Server) admitRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.admit.admitted(r)
		if isLongPoll(r) {
			ctx, end := s.admit.beginLongPoll(r.Context())
			defer end()
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		if hasBody(r) {
			endBody := s.admit.beginBody(r)
			body, ok := s.readBody(w, r, "body")
			endBody()
			if !ok {
				return
			}
			r.Body = &bufferedBody{Reader: bytes.NewReader(body), b: body}
		}
		end, ok := s.admit.beginRequest()
		if !ok {
			s.writeError(w, r, http.StatusServiceUnavailable, api.CodeUnavailable,
				fmt.Sprintf("the agent is already serving %d requests (--api-max-requests); retry", s.opts.MaxRequests))
			return
		}
		defer end()
		next.ServeHTTP(w, r)
	})
}

// hasBody tells whether r comes with a body to read.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// bufferedBody is a request body read whole before its request was
// admitted; readBody takes its bytes as they are.
type bufferedBody struct {
	*bytes.Reader
	b []byte
}

func (*bufferedBody) Close() error { return nil }

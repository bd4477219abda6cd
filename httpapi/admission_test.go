package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
	"github.com/handoffhq/handoff/internal/poll"
)

// The admission tests flood a real listener over TCP with what other
// local programs can send, and check that the worker's requests are still
// served at once. The header and body timeouts are a minute, so that only
// admission, not a timeout, can make room.

const (
	floodTimeout = time.Minute
	// answerWithin bounds waiting for an answer that must come at once: a
	// bound for a failure (the floods hold their connections for a
	// minute), not a measure of speed.
	answerWithin = 10 * time.Second
)

func floodOptions(o Options) Options {
	o.ReadHeaderTimeout, o.BodyReadTimeout = floodTimeout, floodTimeout
	return o
}

// workerGet sends one GET on a new connection and returns the answer.
func workerGet(t *testing.T, addr, target, token string) (*http.Response, []byte) {
	t.Helper()
	c := rawConn(t, addr)
	defer c.Close()
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost\r\n%s\r\n", target, auth)
	resp, body, err := readResponse(t, c, bufio.NewReader(c), answerWithin)
	if err != nil {
		t.Fatalf("GET %s during the flood: %v (the worker has no way in)", target, err)
	}
	return resp, body
}

// workerCommit sends one commit on a new connection and returns the answer.
func workerCommit(t *testing.T, addr string) (*http.Response, []byte) {
	t.Helper()
	c := rawConn(t, addr)
	defer c.Close()
	body := `{"puts":[{"key":"YQ==","value":"MQ=="}]}`
	fmt.Fprintf(c, "POST /tasks/t1/commit HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	resp, b, err := readResponse(t, c, bufio.NewReader(c), answerWithin)
	if err != nil {
		t.Fatalf("commit during the flood: %v (the worker has no way in)", err)
	}
	return resp, b
}

// flood opens n connections to addr and sends each prefix, never more.
func flood(t *testing.T, addr string, n int, prefix string) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = rawConn(t, addr)
		if _, err := io.WriteString(conns[i], prefix); err != nil {
			t.Fatal(err)
		}
	}
	return conns
}

// closed counts the connections the agent has closed, replaced or
// refused (answered 503, then closed).
func closed(conns []net.Conn) int {
	n := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := io.ReadAll(c); err == nil || !isTimeout(err) { // nil: read to EOF
			n++
		}
	}
	return n
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// Slow headers on more connections than the cap: each new connection takes
// the place of the oldest that has not finished its headers, so the
// worker's request is served at once (it used to wait in the kernel's
// queue until the header timeout freed a slot).
func TestSlowHeaderFloodLeavesTheWorkerAPathIn(t *testing.T) {
	for _, token := range []string{"", "s3cret"} {
		t.Run("token="+token, func(t *testing.T) {
			addr := listening(t, seeded(), floodOptions(Options{MaxConns: 8, Token: token}))
			conns := flood(t, addr, 20, "GET /assignment HTTP/1.1\r\nHost: local")
			resp, body := workerGet(t, addr, "/assignment", token)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("the worker's GET /assignment during a slow-header flood = %d %s, want 200", resp.StatusCode, body)
			}
			if n := closed(conns); n < 12 {
				t.Errorf("%d of 20 slow-header connections closed with a cap of 8, want at least 12", n)
			}
		})
	}
}

// Slow bodies on more connections than the cap (complete headers, no
// token): the oldest body still arriving makes room, and the worker's
// commit is served.
func TestSlowBodyFloodLeavesTheWorkerAPathIn(t *testing.T) {
	f := seeded()
	addr := listening(t, f, floodOptions(Options{MaxConns: 8}))
	flood(t, addr, 20, "POST /tasks/t1/commit HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	resp, body := workerCommit(t, addr)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the worker's commit during a slow-body flood = %d %s, want 200", resp.StatusCode, body)
	}
}

// Long-polls beyond their cap: the oldest answers at once (with the view,
// so its client polls again), and commits do not wait for long-polls.
func TestLongPollFloodIsCappedApart(t *testing.T) {
	f := seeded()
	addr := listening(t, f, floodOptions(Options{MaxConns: 64, MaxLongPolls: 4}))
	poll := fmt.Sprintf("GET /assignment?wait=60s&after=%d HTTP/1.1\r\nHost: localhost\r\n\r\n", f.Assignment().Version)
	first := flood(t, addr, 1, poll)[0]
	awaitWaiting(t, f)
	flood(t, addr, 10, poll)
	resp, body, err := readResponse(t, first, bufio.NewReader(first), answerWithin)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the oldest long-poll past the cap: %v %v %s, want it answered 200 at once", resp, err, body)
	}
	for range 3 {
		if resp, body := workerCommit(t, addr); resp.StatusCode != http.StatusOK {
			t.Fatalf("a commit during a long-poll flood = %d %s, want 200", resp.StatusCode, body)
		}
	}
}

// heldCommit is a Backend whose commits wait until the test ends, as a
// commit that waits for NATS does; in counts those waiting.
type heldCommit struct {
	*httpapitest.Backend
	in atomic.Int32
}

func (h *heldCommit) Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	h.in.Add(1)
	<-ctx.Done()
	return api.CommitResult{}, ctx.Err()
}

// holdCommits sends n commits that wait in the backend, and waits until
// they all do.
func holdCommits(t *testing.T, addr string, h *heldCommit, n int) {
	t.Helper()
	body := `{"puts":[{"key":"YQ==","value":"MQ=="}]}`
	flood(t, addr, n, fmt.Sprintf("POST /tasks/t1/commit HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	poll.Eventually(t, answerWithin, fmt.Sprintf("%d commits to reach the backend", n), func() error {
		if in := int(h.in.Load()); in < n {
			return fmt.Errorf("%d of %d did", in, n)
		}
		return nil
	})
}

// Requests beyond MaxRequests are answered 503 at once, with Retry-After,
// instead of waiting; a long-poll is not counted against them.
func TestRequestCapAnswers503AtOnce(t *testing.T) {
	h := &heldCommit{Backend: seeded()}
	addr := listening(t, h, floodOptions(Options{MaxRequests: 2}))
	holdCommits(t, addr, h, 2)
	resp, b := workerGet(t, addr, "/group", "")
	if resp.StatusCode != http.StatusServiceUnavailable || errCode(t, b) != api.CodeUnavailable ||
		resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "--api-max-requests") {
		t.Fatalf("past the request cap = %d %s (Retry-After %q), want 503 unavailable naming the cap, with Retry-After", resp.StatusCode, b, resp.Header.Get("Retry-After"))
	}
	resp, b = workerGet(t, addr, fmt.Sprintf("/assignment?wait=1ms&after=%d", h.Assignment().Version), "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a long-poll at the request cap = %d %s, want 200", resp.StatusCode, b)
	}
}

// With every connection busy with an admitted request, a new connection is
// answered 503 at once and closed, rather than left to wait.
func TestNoRoomAnswers503(t *testing.T) {
	h := &heldCommit{Backend: seeded()}
	addr := listening(t, h, floodOptions(Options{MaxConns: 2}))
	holdCommits(t, addr, h, 2)
	c := rawConn(t, addr)
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
	resp, b, err := readResponse(t, c, bufio.NewReader(c), answerWithin)
	if err != nil {
		t.Fatalf("a connection beyond a full cap: %v, want an answer at once", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || errCode(t, b) != api.CodeUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("no room = %d %s, want 503 unavailable with Retry-After", resp.StatusCode, b)
	}
}

// floodServer serves b with o on network ("tcp" or "unix") until the test
// ends, and returns its address (unix:PATH for a socket) and the server.
func floodServer(t *testing.T, network string, b Backend, o Options) (string, *Server) {
	t.Helper()
	s := New(b, o)
	listen := "127.0.0.1:0"
	if network == "unix" {
		if runtime.GOOS == "windows" {
			t.Skip("the API listens on a Unix socket only on Unix systems")
		}
		dir, err := os.MkdirTemp("", "flood") // short: a socket's path is at most ~100 bytes
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		listen = api.UnixPrefix + filepath.Join(dir, "api.sock")
	}
	bound, err := s.Listen(listen)
	if err != nil {
		t.Fatal(err)
	}
	addr := bound.String()
	if network == "unix" {
		addr = listen
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return addr, s
}

// bodiesArriving counts the server's connections whose request body is
// arriving, and the connections it has accepted.
func bodiesArriving(s *Server) (arriving int, accepted uint64) {
	s.admit.mu.Lock()
	defer s.admit.mu.Unlock()
	for _, c := range s.admit.conns {
		if c.bodyFrom.Load() != 0 {
			arriving++
		}
	}
	return arriving, s.admit.accepted
}

// slowBody is the start of a commit whose body (a megabyte, declared)
// never arrives: a client that sends it a byte a second.
const slowBody = "POST /tasks/t1/commit HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"

// The worker's calls, each on its own new connection: a plain read of its
// assignment, a commit, a batch get. Each must be answered 200.
func workerCalls(t *testing.T, addr, during string) {
	t.Helper()
	if resp, body := workerGet(t, addr, "/assignment", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("the worker's GET /assignment %s = %d %s, want 200", during, resp.StatusCode, body)
	}
	if resp, body := workerCommit(t, addr); resp.StatusCode != http.StatusOK {
		t.Fatalf("the worker's commit %s = %d %s, want 200", during, resp.StatusCode, body)
	}
	c := rawConn(t, addr)
	defer c.Close()
	get := `{"keys":["YQ=="]}`
	fmt.Fprintf(c, "POST /tasks/t1/get HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(get), get)
	resp, body, err := readResponse(t, c, bufio.NewReader(c), answerWithin)
	if err != nil {
		t.Fatalf("the worker's batch get %s: %v (the worker has no way in)", during, err)
	}
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"values":["MQ=="]}` {
		t.Fatalf("the worker's batch get %s = %d %s, want 200 with the value it committed", during, resp.StatusCode, body)
	}
}

// onNewConns runs clients loops until the test ends: each opens a
// connection to addr, calls exchange on it, closes it, and starts again.
func onNewConns(t *testing.T, addr string, clients int, exchange func(net.Conn)) {
	ctx, stop := context.WithCancel(context.Background())
	var running sync.WaitGroup
	t.Cleanup(func() { stop(); running.Wait() })
	for range clients {
		running.Go(func() {
			for ctx.Err() == nil {
				c, err := dial(ctx, addr)
				if err != nil {
					continue
				}
				cut := context.AfterFunc(ctx, func() { c.Close() })
				exchange(c)
				cut()
				c.Close()
			}
		})
	}
}

// slowBodyFlood keeps clients sending slow bodies to addr until the test
// ends: each sends another on a new connection as soon as its last one is
// answered (a 408 once the body timeout passes) or closed. answered counts
// the ends, timedOut the 408s.
type slowBodyFlood struct{ answered, timedOut atomic.Int64 }

func startSlowBodyFlood(t *testing.T, addr string, clients int) *slowBodyFlood {
	f := &slowBodyFlood{}
	onNewConns(t, addr, clients, func(c net.Conn) {
		if _, err := io.WriteString(c, slowBody); err == nil {
			resp, _, err := readResponse(t, c, bufio.NewReader(c), floodTimeout)
			if err == nil && resp.StatusCode == http.StatusRequestTimeout {
				f.timedOut.Add(1)
			}
		}
		f.answered.Add(1)
	})
	return f
}

// holdLongPoll holds the worker's long-poll open on addr, polling again
// after each answer, as a worker's loop does, until the test ends.
func holdLongPoll(t *testing.T, addr string, f *httpapitest.Backend) {
	onNewConns(t, addr, 1, func(c net.Conn) {
		fmt.Fprintf(c, "GET /assignment?wait=60s&after=%d HTTP/1.1\r\nHost: localhost\r\n\r\n", f.Assignment().Version)
		_, _, _ = readResponse(t, c, bufio.NewReader(c), floodTimeout)
	})
}

// Slow bodies (a megabyte declared, one byte sent) on more connections than
// the request cap, below the connection cap and above it, on TCP and on
// the socket; their clients send another as soon as one is answered or
// closed, and the body timeout either outlasts the test or answers them
// 408 again and again, for several worker graces. A body still arriving
// takes no request slot, so each of the worker's calls is served, its
// commits land, and it stays attached throughout, its long-poll held open
// as a worker's loop does. (Each of its calls used to be answered 503
// "already serving 256 requests" until the body timeout freed the slots.)
func TestSlowBodiesTakeNoRequestSlot(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		for _, clients := range []int{300, 600} {
			for _, bodyTimeout := range []time.Duration{floodTimeout, 200 * time.Millisecond} {
				t.Run(fmt.Sprintf("%s/%d/body-timeout=%s", network, clients, bodyTimeout), func(t *testing.T) {
					f := seeded()
					obs := make(observer, 16)
					o := floodOptions(Options{Worker: obs, WorkerGrace: 500 * time.Millisecond})
					o.BodyReadTimeout = bodyTimeout
					addr, s := floodServer(t, network, f, o)
					holdLongPoll(t, addr, f)
					obs.next(t, true)
					before := f.Mutations()

					flood := startSlowBodyFlood(t, addr, clients)
					poll.Eventually(t, answerWithin, "the flood's bodies to be arriving", func() error {
						arriving, accepted := bodiesArriving(s)
						if accepted < uint64(clients) || arriving < DefaultMaxRequests {
							return fmt.Errorf("%d connections accepted, %d bodies arriving", accepted, arriving)
						}
						return nil
					})
					// For several body timeouts and worker graces, and until each
					// client has been answered (or cut off) a few times when the
					// body timeout allows it.
					start, lasts := time.Now(), 3*o.WorkerGrace
					reconnects := bodyTimeout < floodTimeout
					if reconnects {
						lasts += 3 * bodyTimeout
					}
					calls, slowest := 0, time.Duration(0)
					for calls < 3 || time.Since(start) < lasts || (reconnects && flood.timedOut.Load() < int64(clients)) {
						began := time.Now()
						workerCalls(t, addr, fmt.Sprintf("during %d slow bodies (%d answered, %d of them 408)", clients, flood.answered.Load(), flood.timedOut.Load()))
						calls++
						slowest = max(slowest, time.Since(began))
					}
					t.Logf("%d rounds of the worker's calls (the slowest round %s) while the flood was answered %d times (%d of them 408)",
						calls, slowest.Round(time.Millisecond), flood.answered.Load(), flood.timedOut.Load())
					if got := f.Mutations() - before; got != calls {
						t.Errorf("%d mutations of the backend during the flood, want %d (the worker's commits)", got, calls)
					}
					obs.none(t) // attached throughout
				})
			}
		}
	}
}

// dial connects to addr, a TCP address or unix:PATH.
func dial(ctx context.Context, addr string) (net.Conn, error) {
	network := "tcp"
	if path, ok := api.SocketPath(addr); ok {
		network, addr = "unix", path
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

// A request is marked admitted, and the end of its body marked, without
// the admission's lock. By then net/http reads the connection in the
// background (from the start of a request without a body, from the end
// of a body), so the connection waits for the client's bytes again: were
// the marks to wait for the lock, an eviction holding it (a flood's new
// connection or body, at a cap) would see the worker's connection as one
// whose headers or body stall, and cut it off: the worker's call would
// fail with EOF.
func TestRequestMarksNeedNoAdmissionLock(t *testing.T) {
	a := newAdmission(Options{MaxConns: 1, MaxRequests: 1, MaxLongPolls: 1})
	tc := &trackedConn{a: a}
	a.conns = []*trackedConn{tc}
	r := httptest.NewRequest(http.MethodPost, "/tasks/t1/commit", strings.NewReader("{}"))
	r = r.WithContext(context.WithValue(r.Context(), connKey{}, tc))
	a.bodyStarted(r)
	tc.waiting.Store(true) // the background read
	a.mu.Lock()            // an eviction under way
	marked := make(chan struct{})
	go func() {
		a.admitted(r)
		a.bodyDone(r)
		close(marked)
	}()
	select {
	case <-marked:
	case <-time.After(answerWithin):
		a.mu.Unlock()
		t.Fatal("marking a request admitted and its body in waited for the admission's lock")
	}
	victim := a.victimLocked()
	a.mu.Unlock()
	if victim != nil {
		t.Error("a connection whose request is admitted and whose body is in is the one a new connection replaces; want none")
	}
}

// TestIdleConnectionHasAGrace: at the connection cap, a connection that
// has just served a request (its client, the worker, may be sending the
// next one on it) is not what a new connection replaces; one idle for
// longer is, and with none such the new connection is refused instead.
func TestIdleConnectionHasAGrace(t *testing.T) {
	a := newAdmission(Options{MaxConns: 2, MaxRequests: 1, MaxLongPolls: 1})
	now := time.Now()
	worker := &trackedConn{a: a, seq: 1, idle: true, idleSince: now}
	other := &trackedConn{a: a, seq: 2, idle: true, idleSince: now.Add(-idleGrace / 2)}
	a.conns = []*trackedConn{worker, other}
	if v := a.victimLocked(); v != nil {
		t.Fatalf("victim = connection %d, idle for less than %v; want none (the new connection is refused)", v.seq, idleGrace)
	}
	other.idleSince = now.Add(-2 * idleGrace)
	if v := a.victimLocked(); v != other {
		t.Fatalf("victim = %v, want the connection idle for %v", v, 2*idleGrace)
	}
}

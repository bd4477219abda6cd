package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
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

// closed counts the connections the agent has closed.
func closed(conns []net.Conn) int {
	n := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF || (err != nil && !isTimeout(err)) {
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

package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

// serving runs s on a free loopback port; it returns the address, the
// cancel that ends Run, and Run's result once it has returned.
func serving(t *testing.T, s *Server) (addr string, cancel context.CancelFunc, ran <-chan error) {
	t.Helper()
	a, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return a.String(), cancel, done
}

// listening serves b with o on a free loopback port until the test ends
// and returns the address.
func listening(t *testing.T, b Backend, o Options) string {
	t.Helper()
	addr, cancel, ran := serving(t, New(b, o))
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return addr
}

// rawConn dials addr, a TCP address or a socket's (unix:PATH); the test
// ends by closing it.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readResponse reads one HTTP response from c within d.
func readResponse(t *testing.T, c net.Conn, br *bufio.Reader, d time.Duration) (*http.Response, []byte, error) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// send does req and returns the status and body of its answer.
func send(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", req.Method, req.URL, err)
	}
	return resp.StatusCode, body
}

func errCode(t *testing.T, body []byte) string {
	t.Helper()
	var e api.ErrorBody
	if err := json.Unmarshal(body, &e); err != nil || e.Message == "" {
		t.Fatalf("error body %q is not {code, message} JSON (%v)", body, err)
	}
	return e.Code
}

// TestHostHeader sends requests naming various hosts to a real listener:
// names that could come from DNS rebinding are refused before anything
// runs; localhost, IP addresses and allowed names are served.
func TestHostHeader(t *testing.T) {
	f := seeded()
	addr := listening(t, f, Options{AllowedHosts: []string{"Agent.Internal", "*.nope"}})
	_, port, _ := net.SplitHostPort(addr)
	tests := []struct {
		host   string
		status int
	}{
		{"127.0.0.1:" + port, 202},
		{"localhost:" + port, 202},
		{"LOCALHOST", 202},
		{"[::1]:" + port, 202},
		{"10.1.2.3:7070", 202},  // a pod IP: kubelet probes and scrapes use it
		{"localhost:9999", 202}, // a port forward changes the port
		{"agent.internal:" + port, 202},
		{"agent.internal.", 202},
		{"attacker.example:" + port, 403},
		{"localhost.attacker.example", 403},
		{"127.0.0.1.nip.io:" + port, 403},
		{"x.nope", 403}, // no wildcards
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			before := f.Calls("Leave")
			req, _ := http.NewRequest("POST", "http://"+addr+"/leave", nil)
			req.Host = tt.host
			status, body := send(t, req)
			if status != tt.status {
				t.Fatalf("POST /leave with Host %s = %d %s, want %d", tt.host, status, body, tt.status)
			}
			if tt.status == 403 {
				if code := errCode(t, body); code != api.CodeHostNotAllowed {
					t.Errorf("code = %q, want %q", code, api.CodeHostNotAllowed)
				}
				if f.Calls("Leave") != before {
					t.Errorf("a refused Host reached Backend.Leave")
				}
			}
		})
	}

	// "*" turns the check off, for a proxy that rewrites Host.
	open := listening(t, seeded(), Options{AllowedHosts: []string{"*"}})
	req, _ := http.NewRequest("GET", "http://"+open+"/healthz", nil)
	req.Host = "anything.example"
	if status, _ := send(t, req); status != 200 {
		t.Errorf("GET /healthz with Host anything.example and AllowedHosts * = %d, want 200", status)
	}
}

// TestCrossOriginPost sends the POSTs a web page of another origin can make
// without asking (no preflight): they are refused; programs, which send no
// Origin, and same-origin browser requests are served.
func TestCrossOriginPost(t *testing.T) {
	f := seeded()
	addr := listening(t, f, Options{})
	tests := []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		{"program", nil, 202},
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://attacker.example"}, 403},
		{"cross-site form", map[string]string{"Origin": "https://attacker.example", "Content-Type": "application/x-www-form-urlencoded"}, 403},
		{"same origin", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + addr}, 202},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.Calls("Leave")
			req, _ := http.NewRequest("POST", "http://"+addr+"/leave", nil)
			for k, v := range tt.hdr {
				req.Header.Set(k, v)
			}
			status, body := send(t, req)
			if status != tt.status {
				t.Fatalf("POST /leave = %d %s, want %d", status, body, tt.status)
			}
			if tt.status == 403 && (errCode(t, body) != api.CodeCrossOrigin || f.Calls("Leave") != before) {
				t.Errorf("refused with %s, Backend.Leave calls %d→%d; want %s and no call", body, before, f.Calls("Leave"), api.CodeCrossOrigin)
			}
		})
	}
}

// TestCommitContentType: a commit is JSON, declared as such.
func TestCommitContentType(t *testing.T) {
	const body = `{"puts":[{"key":"YQ==","value":"MQ=="}]}`
	tests := []struct {
		contentType string
		status      int
	}{
		{"application/json", 200},
		{"application/json; charset=utf-8", 200},
		{"Application/JSON; charset=UTF-8", 200},
		{"", 415},
		{"text/plain", 415},
		{"text/plain; charset=utf-8", 415},
		{"application/x-www-form-urlencoded", 415},
		{"multipart/form-data; boundary=x", 415},
		{"application/json; charset=latin1", 415},
		{"application/json; foo=bar", 415},
		{"application/jsonx", 415},
		{"application/json;;", 415},
	}
	for _, tt := range tests {
		t.Run(tt.contentType, func(t *testing.T) {
			f := seeded()
			r := serve(New(f, Options{}).Handler(), "POST", "/tasks/t1/commit", []byte(body),
				http.Header{"Content-Type": {tt.contentType}})
			if r.status != tt.status {
				t.Fatalf("commit with Content-Type %q = %d %s, want %d", tt.contentType, r.status, r.body, tt.status)
			}
			if tt.status == 415 {
				if e := r.errBody(t); e.Code != api.CodeUnsupportedMediaType {
					t.Errorf("code = %q, want %q", e.Code, api.CodeUnsupportedMediaType)
				}
				if f.Calls("Commit") != 0 {
					t.Errorf("a refused body reached Backend.Commit")
				}
			}
		})
	}
}

// TestStrictCommitJSON: what encoding/json would accept ambiguously is
// refused, with a message that points at the problem.
func TestStrictCommitJSON(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"field name in capitals", `{"PUTS":[]}`, `unknown field "PUTS"`},
		{"field name capitalised", `{"Epoch":3}`, `unknown field "Epoch"`},
		{"nested field name", `{"puts":[{"Key":"YQ==","value":""}]}`, `unknown field "Key" in puts[0]`},
		{"epoch twice", `{"epoch":99,"epoch":3}`, `field "epoch" appears twice`},
		{"puts twice", `{"puts":[{"key":"YQ==","value":""}],"puts":[{"key":"Yg==","value":""}]}`, `field "puts" appears twice`},
		{"key twice in a put", `{"puts":[{"key":"YQ==","key":"Yg==","value":""}]}`, `field "key" appears twice in puts[0]`},
		{"newline in base64", `{"checkpoint":"AAAA\nAAAA"}`, "checkpoint has a line break"},
		{"carriage return in base64", `{"puts":[{"key":"YQ=\r=","value":""}]}`, "puts[0].key has a line break"},
		{"non-zero padding bits", `{"deletes":["YR=="]}`, "deletes[0] is not standard base64"},
		{"unpadded base64", `{"deletes":["YQ"]}`, "deletes[0] is not standard base64"},
		{"URL-safe base64", `{"deletes":["-_8="]}`, "deletes[0] is not standard base64"},
		{"bytes as an array", `{"puts":[{"key":[97],"value":""}]}`, "puts[0].key is an array"},
		{"base64 past its padding", `{"deletes":["YQ==YQ=="]}`, "deletes[0] is not standard base64"},
		{"escaped newline", `{"checkpoint":"AAAA\u000aAAAA"}`, "checkpoint has a line break"},
		{"escaped slash is fine but short", `{"deletes":["\/w"]}`, "deletes[0] is not standard base64"},
		{"unknown field after a good one", `{"epoch":3,"extra":{"a":[1,"x"]}}`, `unknown field "extra"`},
		{"trailing data", `{"epoch":3} {}`, "after top-level value"},
		{"unterminated", `{"epoch":3`, "not valid JSON"},
		{"wrong type", `{"epoch":"3"}`, "epoch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := seeded()
			r := serve(New(f, Options{}).Handler(), "POST", "/tasks/t1/commit", []byte(tt.body), nil)
			if r.status != 400 {
				t.Fatalf("commit %s = %d %s, want 400", tt.body, r.status, r.body)
			}
			if e := r.errBody(t); e.Code != api.CodeInvalid || !strings.Contains(e.Message, tt.want) {
				t.Errorf("commit %s: %s %q, want %s mentioning %q", tt.body, e.Code, e.Message, api.CodeInvalid, tt.want)
			}
			if f.Calls("Commit") != 0 {
				t.Errorf("a refused body reached Backend.Commit")
			}
		})
	}
	// The exact form still works, nulls included.
	f := seeded()
	r := serve(New(f, Options{}).Handler(), "POST", "/tasks/t1/commit",
		[]byte(`{"puts":[{"key":"YQ==","value":"MQ=="},{"key":"\/w==","value":""}],"deletes":["Yg=="],"checkpoint":null,"epoch":3}`), nil)
	if r.status != 200 || f.Calls("Commit") != 1 {
		t.Fatalf("exact commit = %d %s, want 200", r.status, r.body)
	}
	if got := f.Last().Commit.Puts[1].Key; string(got) != "\xff" {
		t.Errorf("key \"\\/w==\" decoded to %q, want \\xff", got)
	}
}

// TestSlowBody sends a commit's headers and then only part of its body: the
// agent answers 408 once the body timeout passes and closes the connection.
func TestSlowBody(t *testing.T) {
	f := seeded()
	addr := listening(t, f, Options{BodyReadTimeout: 200 * time.Millisecond})
	c := rawConn(t, addr)
	fmt.Fprintf(c, "POST /tasks/t1/commit HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	br := bufio.NewReader(c)
	resp, body, err := readResponse(t, c, br, 10*time.Second)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout || errCode(t, body) != api.CodeTimeout {
		t.Fatalf("stalled body = %d %s, want 408 %s", resp.StatusCode, body, api.CodeTimeout)
	}
	if f.Calls("Commit") != 0 {
		t.Errorf("a stalled body reached Backend.Commit")
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("after the 408 the connection gave %d bytes, %v; want it closed", n, err)
	}
}

// TestSlowBodyOnARouteWithoutBody: a body that no handler reads cannot hold
// the connection either.
func TestSlowBodyOnARouteWithoutBody(t *testing.T) {
	addr := listening(t, seeded(), Options{BodyReadTimeout: 200 * time.Millisecond})
	c := rawConn(t, addr)
	fmt.Fprintf(c, "POST /leave HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\nx")
	br := bufio.NewReader(c)
	if _, _, err := readResponse(t, c, br, 10*time.Second); err != nil {
		t.Fatalf("POST /leave: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the connection stayed open with its body unsent: %v", err)
	}
}

// TestSlowHeaders: a client that never finishes its headers is cut off
// after the header timeout.
func TestSlowHeaders(t *testing.T) {
	addr := listening(t, seeded(), Options{ReadHeaderTimeout: 200 * time.Millisecond})
	c := rawConn(t, addr)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: local")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the agent kept a connection with unfinished headers open for 10s")
	}
}

// slowCommit is a Backend whose commits take a while, as a NATS
// acknowledgement can; a commit whose context ends early fails.
type slowCommit struct {
	*httpapitest.Backend
	take time.Duration
}

func (s slowCommit) Commit(ctx context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	select {
	case <-time.After(s.take):
	case <-ctx.Done():
		return api.CommitResult{}, fmt.Errorf("commit cut off: %w", ctx.Err())
	}
	return s.Backend.Commit(ctx, id, req)
}

// TestBodyTimeoutSparesSlowCommitsAndLongPolls: the body deadline bounds
// reading the body only; a commit that waits for NATS longer, and a
// long-poll that waits for a change longer, complete.
func TestBodyTimeoutSparesSlowCommitsAndLongPolls(t *testing.T) {
	const timeout = 100 * time.Millisecond
	f := seeded()
	addr := listening(t, slowCommit{f, 5 * timeout}, Options{BodyReadTimeout: timeout, ReadHeaderTimeout: timeout})

	resp, err := http.Post("http://"+addr+"/tasks/t1/commit", "application/json",
		strings.NewReader(`{"puts":[{"key":"YQ==","value":"MQ=="}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a commit slower than the body timeout = %d %s, want 200", resp.StatusCode, body)
	}

	polled := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/assignment?wait=60s&after=" + fmt.Sprint(f.Assignment().Version))
		if err == nil {
			resp.Body.Close()
		}
		polled <- err
	}()
	deadline := awaitWaiting(t, f)
	// The long-poll must outlast both timeouts well: a negative check,
	// bounded by time, that fails the moment it ends.
	select {
	case err := <-polled:
		t.Fatalf("the long-poll ended before any change (%v); it waits until %s", err, deadline)
	case <-time.After(5 * timeout):
	}
	f.Bump()
	if err := <-polled; err != nil {
		t.Fatalf("long-poll: %v", err)
	}
}

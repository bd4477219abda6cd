//go:build unix

package httpapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
)

// unixClient calls the API on the socket at path, as http://localhost.
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
}

// servingUnix serves b with o on a socket in a fresh directory until the
// test ends and returns the socket's path.
func servingUnix(t *testing.T, b Backend, o Options) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "api.sock")
	s := New(b, o)
	addr, err := s.Listen(api.UnixPrefix + path)
	if err != nil {
		t.Fatal(err)
	}
	if addr.String() != api.UnixPrefix+path {
		t.Errorf("Listen returned address %q, want %q", addr, api.UnixPrefix+path)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the socket file is still there after Run ended: %v", err)
		}
	})
	return path
}

// TestUnixSocket: over a socket the API is the same API: its mode keeps
// other users out, and its token, Host and Origin checks, its strict
// bodies and its body timeout hold as on TCP.
func TestUnixSocket(t *testing.T) {
	f := seeded()
	path := servingUnix(t, f, Options{Token: "s3cret", BodyReadTimeout: 200 * time.Millisecond})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with mode 0600", fi.Mode())
	}
	hc := unixClient(path)
	call := func(method, target, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://localhost"+target, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s over the socket: %v", method, target, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 400 {
			return resp.StatusCode, errCode(t, b)
		}
		return resp.StatusCode, string(b)
	}
	auth := "Bearer s3cret"
	tests := []struct {
		name, method, target, body string
		hdr                        map[string]string
		status                     int
		want                       string // the body, or the error code
	}{
		{"health needs no token", "GET", "/healthz", "", nil, 200, `{"status":"ok"}` + "\n"},
		{"no token", "GET", "/tasks/t1/state/a", "", nil, 401, api.CodeUnauthorized},
		{"read", "GET", "/tasks/t1/state/a", "", map[string]string{"Authorization": auth}, 200, "1"},
		{"batch get", "POST", "/tasks/t1/get", `{"keys":["YQ=="]}`, map[string]string{"Authorization": auth, "Content-Type": api.MediaJSON}, 200, `{"values":["MQ=="]}` + "\n"},
		{"another host's name", "GET", "/tasks/t1/state/a", "", map[string]string{"Authorization": auth, "Host": "evil.example"}, 403, api.CodeHostNotAllowed},
		{"a cross-site POST", "POST", "/tasks/t1/commit", `{}`, map[string]string{"Authorization": auth, "Content-Type": api.MediaJSON, "Sec-Fetch-Site": "cross-site"}, 403, api.CodeCrossOrigin},
		{"a form body", "POST", "/tasks/t1/commit", `a=b`, map[string]string{"Authorization": auth, "Content-Type": "application/x-www-form-urlencoded"}, 415, api.CodeUnsupportedMediaType},
		{"a loose commit", "POST", "/tasks/t1/commit", `{"Epoch":3}`, map[string]string{"Authorization": auth, "Content-Type": api.MediaJSON}, 400, api.CodeInvalid},
	}
	for _, tt := range tests {
		if status, got := call(tt.method, tt.target, tt.body, tt.hdr); status != tt.status || got != tt.want {
			t.Errorf("%s: %s %s = %d %q, want %d %q", tt.name, tt.method, tt.target, status, got, tt.status, tt.want)
		}
	}
	if n := f.Calls("Commit"); n != 0 {
		t.Errorf("refused commits reached the Backend %d times", n)
	}

	// A body that stalls is answered 408 and its connection closed.
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /tasks/t1/commit HTTP/1.1\r\nHost: localhost\r\nAuthorization: %s\r\nContent-Type: %s\r\nContent-Length: 100\r\n\r\n{", auth, api.MediaBinary)
	br := bufio.NewReader(c)
	resp, body, err := readResponse(t, c, br, 10*time.Second)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout || errCode(t, body) != api.CodeTimeout {
		t.Errorf("stalled body = %d %s, want 408 %s", resp.StatusCode, body, api.CodeTimeout)
	}
}

func TestUnixSocketGroup(t *testing.T) {
	gid := os.Getgid()
	path := servingUnix(t, seeded(), Options{SocketGroup: strconv.Itoa(gid)})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o660 || int(st.Gid) != gid {
		t.Errorf("socket mode %v group %d, want 0660 and group %d", fi.Mode().Perm(), st.Gid, gid)
	}
}

// TestUnixSocketPath: a socket left by a killed agent is replaced; one a
// process still serves on, a file that is no socket, or a path too long
// for a socket is refused, with a message that says what to do.
func TestUnixSocketPath(t *testing.T) {
	dir := t.TempDir()

	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // as a killed agent leaves it
	s := New(seeded(), Options{})
	if _, err := s.Listen(api.UnixPrefix + stale); err != nil {
		t.Errorf("Listen over a stale socket: %v", err)
	} else {
		s.ln.Close()
	}

	busy := filepath.Join(dir, "busy.sock")
	other, err := net.Listen("unix", busy)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{busy, "in use"},
		{file, "not a socket"},
		{"/" + strings.Repeat("d", 120) + "/api.sock", "at most 107"},
		{"", "empty"},
	} {
		_, err := New(seeded(), Options{}).Listen(api.UnixPrefix + tt.path)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Listen(unix:%s) = %v, want an error saying %q", tt.path, err, tt.want)
		}
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("Listen removed a file that was no socket: %v", err)
	}
}

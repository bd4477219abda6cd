package flood

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/handoffhq/handoff/internal/poll"
)

// lines is a writer whose JSON lines can be read while it is written to.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// last decodes the last line written.
func (l *lines) last(t *testing.T) (Counts, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var c Counts
	found := false
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("flood printed %q, not its counters: %v", sc.Text(), err)
		}
		found = true
	}
	return c, found
}

// The flood sends each slow body's headers and then its body a byte at a
// time, and starts again on a new connection once it is answered: against
// a server that answers 408 to a body that takes longer than 100 ms, every
// connection is answered 408 again and again, having sent several bytes
// of its body each time.
func TestFloodTricklesBodiesAndStartsAgainWhenAnswered(t *testing.T) {
	const conns = 4
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		paths []string
	)
	srv := &http.Server{
		ReadTimeout: 100 * time.Millisecond,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			paths = append(paths, r.Method+" "+r.URL.Path)
			mu.Unlock()
			if _, err := io.ReadAll(r.Body); err != nil {
				w.WriteHeader(http.StatusRequestTimeout)
				return
			}
			t.Errorf("a body of the flood arrived whole")
		}),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		_ = srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()

	var out lines
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		ran <- Run(ctx, []string{"--target", ln.Addr().String(), "--conns", fmt.Sprint(conns), "--every", "10ms", "--report", "10ms"}, Env{Stdout: &out})
	}()
	poll.Eventually(t, 30*time.Second, "every connection answered 408 twice", func() error {
		if c, _ := out.last(t); c.TimedOut < 2*conns {
			return fmt.Errorf("counters %+v", c)
		}
		return nil
	})
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	c, ok := out.last(t)
	switch {
	case !ok || !c.Done:
		t.Fatalf("last line %+v, want the counters marked done", c)
	case c.Open != 0 || c.Arriving != 0:
		t.Errorf("after the stop %d connections open, %d bodies arriving; want none", c.Open, c.Arriving)
	case c.Connects < 2*conns || c.TimedOut < 2*conns || c.Answered < c.TimedOut:
		t.Errorf("counters %+v, want each connection made and answered 408 at least twice", c)
	case c.BytesSent <= c.Connects:
		t.Errorf("%d body bytes sent on %d connections, want more than the first byte of each", c.BytesSent, c.Connects)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range paths {
		if p != "POST /tasks/p-0/commit" {
			t.Errorf("the flood sent %s, want POST /tasks/p-0/commit", p)
		}
	}
}

func TestFloodFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no target", []string{}, "--target"},
		{"no connections", []string{"--target", "127.0.0.1:1", "--conns", "0"}, "--conns"},
		{"an argument", []string{"--target", "127.0.0.1:1", "extra"}, "unexpected argument"},
		{"a body that cannot trickle", []string{"--target", "127.0.0.1:1", "--content-length", "1"}, "--content-length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(tc.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parse(%q) = %v, want an error naming %s", tc.args, err, tc.want)
			}
		})
	}
}

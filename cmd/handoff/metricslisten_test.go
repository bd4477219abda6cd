package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/poll"
)

// TestMetricsListen runs an agent whose API is on a Unix socket, with a
// token, and a metrics listener on a TCP port, as the Kubernetes example
// runs one: Prometheus and the probes reach /metrics, /healthz and /readyz
// on the port without the token, and nothing else is served there; the
// API on the socket still wants the token, for /metrics too.
func TestMetricsListen(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent as a child process")
	}
	sock := "unix:" + filepath.Join(shortTempDir(t), "api.sock")
	a := startAgent(t, "m1", nil, "--group", "metrics", "--member-id", "m1", "--data-dir", t.TempDir(),
		"--listen", sock, "--api-token", "s3cret", "--metrics-listen", "127.0.0.1:0",
		"--embedded-nats-listen", "127.0.0.1:0", "--tasks", "orders-0..3", "--require-worker=false")
	started, _ := a.find("agent started")
	addr, _ := started["metrics"].(string)
	if addr == "" {
		t.Fatalf("the agent logged %v: no metrics address", started)
	}
	port := "http://" + addr
	// call calls path on the listener at base (http://HOST:PORT, or
	// unix:PATH), with token unless empty.
	call := func(method, base, path, token string) (int, string) {
		t.Helper()
		url := base + path
		if _, socket := api.SocketPath(base); socket {
			url = "http://localhost" + path
		}
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		hc := &http.Client{Transport: client.NewTransport(base)}
		defer hc.CloseIdleConnections()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s on %s: %v", method, path, base, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s on %s: %v", method, path, base, err)
		}
		return resp.StatusCode, string(b)
	}

	// The probes, without the token: alive at once, ready once the member
	// has joined.
	if code, body := call("GET", port, "/healthz", ""); code != http.StatusOK {
		t.Errorf("GET /healthz on the metrics listener: %d %s, want 200", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startDeadline)
	defer cancel()
	errNotReady := errors.New("not ready")
	if err := poll.Until(ctx, 50*time.Millisecond, func() error {
		if code, _ := call("GET", port, "/readyz", ""); code != http.StatusOK {
			return fmt.Errorf("%w: %d", errNotReady, code)
		}
		return nil
	}); err != nil {
		t.Errorf("GET /readyz on the metrics listener: %v", err)
	}

	// The API on the socket refuses /metrics without the token; the
	// refusal is counted by code, which the scrape on the port shows.
	if code, body := call("GET", sock, "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics on the API without the token: %d %s, want 401", code, body)
	}
	// The leader's gauges are set once its plan is published, which the
	// member may see first: scrape until every series shows.
	want := []string{
		`handoff_tasks{role="active"}`,
		"handoff_store_writable 1",
		`handoff_api_errors_total{code="unauthorized"} 1`,
		"handoff_group_members 1",
		"handoff_unowned_tasks 0",
		"go_goroutines",
	}
	var missing []string
	errMissing := errors.New("series missing")
	if err := poll.Until(ctx, 50*time.Millisecond, func() error {
		code, metrics := call("GET", port, "/metrics", "")
		if code != http.StatusOK {
			return poll.Permanent(fmt.Errorf("status %d, want 200: %s", code, metrics))
		}
		missing = missing[:0]
		for _, w := range want {
			if !strings.Contains(metrics, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			return errMissing
		}
		return nil
	}); err != nil {
		t.Errorf("GET /metrics on the metrics listener without the token: %v %q", err, missing)
	}

	// Nothing of the worker's API is served on the port, token or not.
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/assignment", http.StatusNotFound},
		{"GET", "/group", http.StatusNotFound},
		{"POST", "/leave", http.StatusNotFound},
		{"POST", "/metrics", http.StatusMethodNotAllowed},
	} {
		if code, body := call(tt.method, port, tt.path, "s3cret"); code != tt.want {
			t.Errorf("%s %s on the metrics listener: %d %s, want %d", tt.method, tt.path, code, body, tt.want)
		}
	}
}

func TestMetricsListenValidated(t *testing.T) {
	_, err := loadConfig([]string{"--metrics-listen", "9090"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Errorf("--metrics-listen 9090: err = %v, want one that names --metrics-listen and says host:port", err)
	}
}

package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHealth runs 'handoff health' against a server that answers
// /healthz and /readyz as an agent's API does: the address comes from
// --addr over HANDOFF_LISTEN, a wildcard host is probed on the loopback, a
// non-200 answer fails with the API's message, and an address where
// nothing listens fails with a hint.
func TestHealth(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/healthz":
			w.Write([]byte(`{"status":"ok"}` + "\n"))
		case r.URL.Path == "/readyz" && ready.Load():
			w.Write([]byte(`{"status":"ready"}` + "\n"))
		case r.URL.Path == "/readyz":
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"code":"unavailable","message":"not ready: waiting for the first generation"}` + "\n"))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	// The same server on a Unix socket, as an agent with --listen unix:PATH.
	sock := filepath.Join(t.TempDir(), "api.sock")
	sln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	onSocket := httptest.NewUnstartedServer(srv.Config.Handler)
	onSocket.Listener.Close()
	onSocket.Listener = sln
	onSocket.Start()
	defer onSocket.Close()
	addr := srv.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	closed := closedAddr(t)

	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		ready   bool
		wantOut string // in stdout, on success
		wantErr string // in the error; empty means success
	}{
		{name: "healthz", args: []string{"--addr", addr}, wantOut: `/healthz: {"status":"ok"}`},
		{name: "wildcard listen address", args: []string{"--addr", "0.0.0.0:" + port}, wantOut: "127.0.0.1:" + port + "/healthz"},
		{name: "address from HANDOFF_LISTEN", env: map[string]string{"HANDOFF_LISTEN": addr}, wantOut: addr + "/healthz"},
		{name: "flag over HANDOFF_LISTEN", args: []string{"--addr", addr}, env: map[string]string{"HANDOFF_LISTEN": closed}, wantOut: addr},
		{name: "ready", args: []string{"--addr", addr, "--ready"}, ready: true, wantOut: `/readyz: {"status":"ready"}`},
		{name: "not ready", args: []string{"--addr", addr, "--ready"}, wantErr: "answered 503: not ready: waiting for the first generation"},
		{name: "no agent", args: []string{"--addr", closed}, wantErr: "is the agent running with --listen " + closed},
		{name: "socket", args: []string{"--addr", "unix:" + sock}, wantOut: "unix:" + sock + ` /healthz: {"status":"ok"}`},
		{name: "socket ready", args: []string{"--addr", "unix:" + sock, "--ready"}, ready: true, wantOut: `/readyz: {"status":"ready"}`},
		{name: "socket from HANDOFF_LISTEN", env: map[string]string{"HANDOFF_LISTEN": "unix:" + sock}, wantOut: "unix:" + sock},
		{name: "no socket", args: []string{"--addr", "unix:" + sock + ".gone"}, wantErr: "is the agent running with --listen unix:" + sock + ".gone"},
		{name: "argument", args: []string{"--addr", addr, "extra"}, wantErr: `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready.Store(tt.ready)
			var out bytes.Buffer
			e := &env{stdout: &out, stderr: &out, getenv: func(k string) string { return tt.env[k] }}
			err := run(context.Background(), append([]string{"health"}, tt.args...), e)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("handoff health %q: %v", tt.args, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("handoff health %q: error %v, want one containing %q", tt.args, err, tt.wantErr)
			case !strings.Contains(out.String(), tt.wantOut):
				t.Errorf("handoff health %q printed %q, want %q in it", tt.args, out.String(), tt.wantOut)
			}
		})
	}
}

// closedAddr returns an address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

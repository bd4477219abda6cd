package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
)

// 'handoff health' exists because the image is distroless: a container
// probe has no curl, and the binary itself must be the probe.
func init() {
	register("health", "probe an agent's /healthz or /readyz; exit status 0 when it answers 200", runHealth)
}

// defaultAPIAddr is the address of the agent's API when none is given:
// HANDOFF_LISTEN if set (the container's own agent), else the default
// --listen.
func defaultAPIAddr(getenv func(string) string) string {
	if a := getenv(envName("listen")); a != "" {
		return a
	}
	return DefaultConfig().Listen
}

// dialableAddr turns a listen address into one a client can reach: a
// wildcard host (0.0.0.0, ::, empty) means the loopback address.
func dialableAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// apiBase returns the base URL of the agent's API at a listen address and
// the transport that reaches it: over TCP to a dialable host, or through
// the socket of a unix:PATH address. No proxy: the agent is local, and
// HTTP_PROXY in a container must not turn a probe into a call elsewhere.
func apiBase(addr string) (string, *http.Transport) {
	if _, ok := api.SocketPath(addr); ok {
		return "http://localhost", client.NewTransport(addr)
	}
	return "http://" + dialableAddr(addr), &http.Transport{Proxy: nil}
}

// runHealth is for container probes, where there may be no curl (the
// image is distroless): it GETs /healthz (or /readyz) and fails unless the
// answer is 200.
func runHealth(ctx context.Context, args []string, e *env) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(e.stdout)
	addr := fs.String("addr", defaultAPIAddr(e.getenv), "`address` of the agent's API (host:port, or unix:PATH for its Unix socket); HANDOFF_LISTEN, if set, is the default")
	ready := fs.Bool("ready", false, "probe /readyz (joined the group, NATS connected) instead of /healthz (the API serves)")
	timeout := fs.Duration("timeout", 3*time.Second, "fail if there is no answer within this `long`")
	fs.Usage = func() {
		fmt.Fprint(e.stdout, `Usage: handoff health [--addr HOST:PORT|unix:PATH] [--ready] [--timeout D]

Probes the agent's API for a container health check, liveness, readiness or
startup probe: exit status 0 when /healthz (or /readyz with --ready) answers
200, 1 otherwise. No token is needed.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("health: unexpected argument %q; see 'handoff health --help'", fs.Arg(0))
	}
	path := "/healthz"
	if *ready {
		path = "/readyz"
	}
	base, transport := apiBase(*addr)
	url := base + path
	shown := url // what messages call it
	if _, socket := api.SocketPath(*addr); socket {
		shown = *addr + " " + path
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	hc := &http.Client{Transport: transport}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("health: %s: %w (is the agent running with --listen %s?)", shown, err, *addr)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s answered %d: %s", shown, resp.StatusCode, apiMessage(body))
	}
	fmt.Fprintf(e.stdout, "%s: %s\n", shown, strings.TrimSpace(string(body)))
	return nil
}

// apiMessage is the message of an API error body, or the body itself.
func apiMessage(body []byte) string {
	var apiErr struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &apiErr) == nil && apiErr.Message != "" {
		return apiErr.Message
	}
	return strings.TrimSpace(string(body))
}

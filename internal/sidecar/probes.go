package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// probeShutdown bounds how long the metrics listener waits for a scrape in
// flight when the member stops.
const probeShutdown = 5 * time.Second

// listenProbes binds the metrics listener (host:port) for the API's
// ProbeHandler.
func (m *Member) listenProbes(addr string) error {
	if m.API == nil {
		return errors.New("a metrics listener needs the worker API: set the API's listen address too")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listener: listen on %s: %w", addr, err)
	}
	m.probes, m.MetricsAddr = ln, ln.Addr()
	return nil
}

// serveProbes serves /metrics, /healthz and /readyz on the metrics
// listener until ctx ends.
func (m *Member) serveProbes(ctx context.Context) error {
	srv := &http.Server{Handler: m.API.ProbeHandler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(m.probes) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve the metrics listener on %s: %w", m.MetricsAddr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), probeShutdown)
	defer cancel()
	if srv.Shutdown(sctx) != nil {
		_ = srv.Close()
	}
	<-served
	return nil
}

// Package natstest gives tests a real JetStream server: an in-process
// nats-server on a random port with its store in the test's temp dir, shut
// down when the test ends.
package natstest

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/internal/natsembed"
)

// Server is a running test server. URL and Dir stay the same across Restart.
type Server struct {
	URL string // client URL
	Dir string // JetStream store directory

	listen string
	srv    *natsembed.Server
}

// Start starts a JetStream server for t and stops it in t.Cleanup. Set
// NATSTEST_LOG=1 to see the server's log in the test output.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{Dir: t.TempDir(), listen: "127.0.0.1:-1"}
	s.start(t)
	host, port, err := net.SplitHostPort(s.srv.ClientURL()[len("nats://"):])
	if err != nil {
		t.Fatalf("natstest: client URL %q: %v", s.srv.ClientURL(), err)
	}
	s.listen = net.JoinHostPort(host, port) // restarts reuse the port
	t.Cleanup(s.Shutdown)
	return s
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	log := zerolog.Nop()
	if os.Getenv("NATSTEST_LOG") != "" {
		log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	srv, err := natsembed.Start(natsembed.Options{DataDir: s.Dir, Listen: s.listen, Logger: log})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	s.srv = srv
	s.URL = srv.ClientURL()
}

// Conn returns a TCP connection to the server, closed in t.Cleanup. It
// reconnects forever, so it survives Restart.
func (s *Server) Conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.URL, nats.MaxReconnects(-1), nats.ReconnectWait(nats.DefaultReconnectWait/100))
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on a new connection from Conn.
func (s *Server) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(s.Conn(t))
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return js
}

// Restart stops the server and starts it again on the same port and store.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.srv.Shutdown()
	s.start(t)
}

// Resume starts a server that Shutdown stopped again, on the same port and
// store, so that a test can act while it is down.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.start(t)
}

// Shutdown stops the server; it is safe to call more than once.
func (s *Server) Shutdown() { s.srv.Shutdown() }

// StartDeployed starts a JetStream server for t with nats-server's own
// limits, as a deployment's server has them (Start's, like the embedded
// server the agent runs without --nats, lifts the bound on consumers per
// stream), and returns a JetStream context on a connection to it. Both end
// in t.Cleanup.
func StartDeployed(t testing.TB) jetstream.JetStream {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: nats-server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return js
}

// CreateConsumers creates n consumers of stream, each filtered on subject
// and dropped a minute after its last use, and fails t at the first the
// server refuses: what a group holds on a stream at scale (tests of the
// stream's consumer bound).
func CreateConsumers(ctx context.Context, t testing.TB, js jetstream.JetStream, stream, subject string, n int) {
	t.Helper()
	for i := range n {
		_, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{FilterSubject: subject, InactiveThreshold: time.Minute})
		if err != nil {
			t.Fatalf("consumer %d of %d on %s: %v", i+1, n, stream, err)
		}
	}
}

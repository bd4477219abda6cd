// Package natsembed runs the single-node NATS server (JetStream on disk) that
// the agent embeds when it is given no --nats URL. The server lives in the
// agent's process; the agent may talk to it over TCP or in-process.
package natsembed

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// DefaultListen is the client address used when Options.Listen is empty.
const DefaultListen = "127.0.0.1:4222"

// readyTimeout bounds how long Start waits for the server to accept clients.
const readyTimeout = 30 * time.Second

// ErrLocked is wrapped by Start's error when another process (or another
// Server of this process) uses the data directory.
var ErrLocked = errors.New("natsembed: data directory is in use")

// ErrNoAuth is wrapped by Start's error when the server would listen on an
// address other hosts can reach without requiring credentials.
var ErrNoAuth = errors.New("natsembed: a listen address other than loopback needs credentials")

// Options configure the embedded server.
type Options struct {
	// DataDir holds the JetStream store and the LOCK file. Required.
	DataDir string
	// Listen is the client address, host:port. Empty means DefaultListen;
	// port 0 or -1 picks a free port (see Server.ClientURL).
	Listen string
	// SyncAlways makes JetStream fsync every write before acknowledging it.
	// Off, JetStream syncs periodically: a killed process loses nothing, a
	// lost machine may lose the last interval.
	SyncAlways bool
	// Logger receives the server's messages: errors and warnings at their
	// levels, notices at debug, the server's debug and trace output at
	// trace level (only when the logger's level enables trace).
	Logger zerolog.Logger
	// ServerName names the server; empty lets the server pick its ID.
	ServerName string
	// Token, or User and Password, are the credentials the server requires
	// of every client; InProcessConn presents them. Without them the server
	// is open to whoever reaches it, so Start refuses a Listen address other
	// than loopback (see Loopback) unless they are set.
	Token    string
	User     string
	Password string
}

// Loopback reports whether a listen host reaches this machine only:
// "localhost" or a loopback IP. An empty or unspecified host (0.0.0.0, ::)
// listens on every interface, and another name may resolve to any address.
func Loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// auth checks the credentials of o and returns whether any are set.
func (o Options) auth() (bool, error) {
	switch {
	case o.Token != "" && (o.User != "" || o.Password != ""):
		return false, errors.New("give a token or a user and password, not both")
	case (o.User == "") != (o.Password == ""):
		return false, errors.New("a user needs a password, and a password a user")
	}
	return o.Token != "" || o.User != "", nil
}

// Server is a running embedded NATS server. Shutdown stops it and releases
// its data directory.
type Server struct {
	srv      *server.Server
	auth     []nats.Option // the credentials InProcessConn presents
	lockFile *os.File
	once     sync.Once
}

// Start starts the server and returns once it accepts clients. It fails with
// an error naming the directory (wrapping ErrLocked) when the data directory
// is in use, and with an error naming the address when it is taken.
func Start(opts Options) (*Server, error) {
	if opts.DataDir == "" {
		return nil, errors.New("start nats: no data directory given")
	}
	listen := opts.Listen
	if listen == "" {
		listen = DefaultListen
	}
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("start nats: listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < -1 || port > 65535 {
		return nil, fmt.Errorf("start nats: listen address %q: port must be a number from 0 to 65535", listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	hasAuth, err := opts.auth()
	if err != nil {
		return nil, fmt.Errorf("start nats: credentials: %w", err)
	}
	if !hasAuth && !Loopback(host) {
		return nil, fmt.Errorf("start nats on %s: other hosts can reach this address and no credentials are set: "+
			"anyone could read, change or purge the streams; set a token or a user and password, or listen on 127.0.0.1: %w", listen, ErrNoAuth)
	}

	dir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("start nats: data directory %s: %w", opts.DataDir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start nats: %w", err)
	}
	lockFile, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("start nats: %w", err)
	}
	s := &Server{lockFile: lockFile}
	switch {
	case opts.Token != "":
		s.auth = []nats.Option{nats.Token(opts.Token)}
	case opts.User != "":
		s.auth = []nats.Option{nats.UserInfo(opts.User, opts.Password)}
	}
	ok := false
	defer func() {
		if !ok {
			s.Shutdown()
		}
	}()

	if port > 0 {
		// Probe first: the server itself only logs a listen failure.
		l, err := net.Listen("tcp", net.JoinHostPort(host, portStr))
		if err != nil {
			return nil, fmt.Errorf("start nats: listen on %s: %w", listen, err)
		}
		_ = l.Close()
	}

	sopts := &server.Options{
		ServerName:    opts.ServerName,
		Host:          host,
		Port:          port,
		JetStream:     true,
		StoreDir:      dir,
		SyncAlways:    opts.SyncAlways,
		NoSigs:        true,
		Username:      opts.User,
		Password:      opts.Password,
		Authorization: opts.Token,
		// No cap on consumers per stream: each learner and standby tails
		// its task's changelog with one, and the server's default (1,000
		// per stream) would refuse them in a group with more copies.
		JetStreamLimits: server.JSLimitOpts{DefaultMaxConsumers: -1},
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("start nats: %w", err)
	}
	s.srv = srv
	logger := &serverLogger{log: opts.Logger, fatal: make(chan string, 1)}
	srv.SetLoggerV2(logger, logger.traceEnabled(), logger.traceEnabled(), false)
	srv.Start() // returns once the client listener is up, or after a fatal error

	select {
	case msg := <-logger.fatal:
		return nil, fmt.Errorf("start nats on %s with data in %s: %s", listen, dir, msg)
	default:
	}
	if err := readyForConnections(srv, logger.fatal); err != nil {
		return nil, fmt.Errorf("start nats on %s with data in %s: %w", listen, dir, err)
	}
	if !srv.JetStreamEnabled() {
		return nil, fmt.Errorf("start nats with data in %s: jetstream is not enabled", dir)
	}
	ok = true
	return s, nil
}

// readyForConnections waits for the server to accept clients, or for a fatal
// error it logs meanwhile, whichever comes first.
func readyForConnections(srv *server.Server, fatal <-chan string) error {
	ready := make(chan bool, 1)
	go func() { ready <- srv.ReadyForConnections(readyTimeout) }()
	select {
	case ok := <-ready:
		if !ok {
			return fmt.Errorf("not ready for connections after %s", readyTimeout)
		}
		return nil
	case msg := <-fatal:
		return errors.New(msg)
	}
}

// lockDir takes an exclusive, non-blocking flock on dir/LOCK. flock locks
// belong to the open file, so a second lock from this process fails too.
func lockDir(dir string) (*os.File, error) {
	name := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data directory %s is used by another handoff agent or embedded server (%s is locked): %w", dir, name, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return f, nil
}

// ClientURL is the URL clients connect to, with the actual port.
func (s *Server) ClientURL() string { return s.srv.ClientURL() }

// InProcessConn connects to the server without a socket, with the server's
// credentials. opts are applied after those.
func (s *Server) InProcessConn(opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.InProcessServer(s.srv)}, s.auth...)
	all = append(all, opts...)
	nc, err := nats.Connect(s.ClientURL(), all...)
	if err != nil {
		return nil, fmt.Errorf("connect in-process to nats: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server gracefully, waits until it has stopped and
// releases the data directory. It is safe to call more than once.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		if s.srv != nil {
			s.srv.Shutdown()
			s.srv.WaitForShutdown()
		}
		if s.lockFile != nil {
			_ = syscall.Flock(int(s.lockFile.Fd()), syscall.LOCK_UN)
			_ = s.lockFile.Close()
		}
	})
}

package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/handoffhq/handoff/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes    = 1 << 20   // 1 MiB
	DefaultMaxKeyBytes     = 4 << 10   // 4 KiB
	DefaultMaxValueBytes   = 512 << 10 // 512 KiB
	DefaultMaxLongPoll     = 60 * time.Second
	DefaultScanLimit       = 1000  // items a scan returns when ?limit= is absent
	DefaultMaxScanLimit    = 10000 // a larger ?limit= is cut to this
	DefaultShutdownTimeout = 5 * time.Second
	// DefaultReadHeaderTimeout bounds how long a client may take to send
	// a request's line and headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultBodyReadTimeout bounds how long a client may take to send a
	// request's body, once its headers are in. A long-poll has no body.
	DefaultBodyReadTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a kept-alive connection idle this long.
	DefaultIdleTimeout = 2 * time.Minute
)

// Log field names.
const (
	fieldMethod   = "method"
	fieldPath     = "path"
	fieldStatus   = "status"
	fieldDuration = "duration"
	fieldAddr     = "addr"
)

// Options configure a Server. Zero values mean the defaults above.
type Options struct {
	// Token, if set, is required as "Authorization: Bearer <token>" on
	// every call but /healthz and /readyz.
	Token string
	// MaxBodyBytes bounds a request body (413 too_large beyond it).
	MaxBodyBytes int64
	// MaxKeyBytes and MaxValueBytes bound each key and value of a commit
	// (and the checkpoint, which is bounded like a value).
	MaxKeyBytes   int
	MaxValueBytes int
	// MaxLongPoll caps GET /assignment?wait=.
	MaxLongPoll time.Duration
	// MaxScanLimit caps GET /tasks/{id}/state?limit=; a scan returns at most
	// this many items and a "next" key to continue from.
	MaxScanLimit int
	// MaxGetKeys bounds the keys of one POST /tasks/{id}/get, and
	// MaxGetBytes the values it answers with (413 too_large beyond either).
	MaxGetKeys  int
	MaxGetBytes int
	// ShutdownTimeout bounds how long Run waits for in-flight requests
	// once its context ends; requests still running then are cut off.
	ShutdownTimeout time.Duration
	// AllowedHosts are the host names, besides localhost, IP addresses
	// and the host of the listen address, that a request's Host header may
	// name; any other is refused (403 host_not_allowed), which keeps a web
	// page from reaching the API through DNS rebinding. A port on a name
	// is ignored; "*" allows any name.
	AllowedHosts []string
	// ReadHeaderTimeout and BodyReadTimeout bound how long a client may
	// take to send a request's headers, and then its body; a slow request
	// is answered 408 timeout (or, for headers, its connection closed).
	// They do not bound a long-poll, which has no body.
	ReadHeaderTimeout time.Duration
	BodyReadTimeout   time.Duration
	// IdleTimeout closes kept-alive connections idle this long.
	IdleTimeout time.Duration
	// MaxConns bounds the connections open at once: a new one takes the
	// place of the oldest whose body stalls (or whose headers stall, or
	// that is idle), or is answered 503 (admission.go).
	// MaxRequests bounds the requests other than long-polls that run at
	// once, each counted once its body is in (more are answered 503 at
	// once), and apart from them the bodies arriving (a new one cuts off
	// the oldest stalled one); MaxLongPolls bounds the waiting long-polls
	// (the oldest answers at once to make room).
	MaxConns     int
	MaxRequests  int
	MaxLongPolls int
	// SocketGroup, for an API listening on a Unix socket, is the group
	// (name or numeric ID) whose members may connect besides the agent's
	// user: the socket is then that group's, mode 0660. Empty: mode 0600.
	SocketGroup string
	// Metrics, if non-nil, is served at /metrics (promhttp's handler).
	Metrics http.Handler
	// Registerer, if set, gets the API's own metrics (the error answers by
	// code).
	Registerer prometheus.Registerer
	// Worker, if non-nil, is told when the worker attaches and detaches
	// (see WorkerObserver); WorkerGrace is the grace after its last
	// GET /assignment (DefaultWorkerGrace if zero).
	Worker      WorkerObserver
	WorkerGrace time.Duration
	// Logger receives one debug line per request and the errors behind
	// 500 responses.
	Logger zerolog.Logger
}

func (o *Options) setDefaults() {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxKeyBytes <= 0 {
		o.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if o.MaxValueBytes <= 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
	if o.MaxLongPoll <= 0 {
		o.MaxLongPoll = DefaultMaxLongPoll
	}
	if o.MaxScanLimit <= 0 {
		o.MaxScanLimit = DefaultMaxScanLimit
	}
	if o.MaxGetKeys <= 0 {
		o.MaxGetKeys = DefaultMaxGetKeys
	}
	if o.MaxGetBytes <= 0 {
		o.MaxGetBytes = DefaultMaxGetBytes
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.BodyReadTimeout <= 0 {
		o.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxRequests <= 0 {
		o.MaxRequests = DefaultMaxRequests
	}
	if o.MaxLongPolls <= 0 {
		o.MaxLongPolls = DefaultMaxLongPolls
	}
}

// Server serves the worker-facing API over a Backend. Handler may be used
// on its own (tests, embedding); Listen then Run serve it on a socket.
// Listen and Run are each called at most once.
type Server struct {
	b    Backend
	opts Options
	log  zerolog.Logger
	mux  *chi.Mux

	tokenSum [sha256.Size]byte

	// hosts are the allowed Host names beyond localhost and IP addresses,
	// lower case; anyHost allows every name. Listen adds its host.
	hostsMu sync.RWMutex
	hosts   map[string]bool
	anyHost bool
	cross   *http.CrossOriginProtection

	// closing ends when Run starts shutting down; it cuts long-polls short
	// so that graceful shutdown need not wait for them.
	closing context.Context
	close   context.CancelFunc

	mu sync.Mutex
	ln net.Listener

	shutdownSent     chan struct{} // closed once a view with Shutdown was sent
	shutdownSentOnce sync.Once

	worker *workerTracker // nil without Options.Worker
	admit  *admission
	errors *prometheus.CounterVec // error answers by code
}

// New returns a Server for b. It does not listen yet.
func New(b Backend, o Options) *Server {
	o.setDefaults()
	s := &Server{b: b, opts: o, log: o.Logger, shutdownSent: make(chan struct{}),
		hosts: map[string]bool{}, cross: http.NewCrossOriginProtection()}
	s.worker = newWorkerTracker(o.Worker, o.WorkerGrace)
	s.admit = newAdmission(o)
	s.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "handoff_api_errors_total",
		Help: "Error answers of the worker API, by code (docs/api.md): not_owner and resume for a worker that lost or must restart a task, unavailable (503), unauthorized, invalid and the others.",
	}, []string{"code"})
	if o.Registerer != nil {
		o.Registerer.MustRegister(s.errors)
	}
	if o.Token != "" {
		s.tokenSum = sha256.Sum256([]byte(o.Token))
	}
	for _, h := range o.AllowedHosts {
		if h = strings.TrimSpace(h); h == "*" {
			s.anyHost = true
		} else if h != "" {
			s.hosts[hostName(h)] = true
		}
	}
	s.closing, s.close = context.WithCancel(context.Background())
	s.mux = s.routes()
	return s
}

// Handler returns the API's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// ShutdownDelivered is closed once the server has answered GET /assignment
// with a view that says shutdown. An agent that is about to exit waits for
// it (bounded) before ending Run, so that its worker learns it may exit
// instead of finding the API gone.
func (s *Server) ShutdownDelivered() <-chan struct{} { return s.shutdownSent }

// Listen binds addr (":0" picks a free port), or the Unix socket it names
// (unix:PATH, see UnixPrefix), and returns the bound address. It does not
// serve; Run does.
func (s *Server) Listen(addr string) (net.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil, errors.New("httpapi: Listen called twice")
	}
	if path, ok := api.SocketPath(addr); ok {
		ln, bound, err := listenUnix(path, s.opts.SocketGroup)
		if err != nil {
			return nil, err
		}
		s.ln = s.admit.listener(ln)
		return bound, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if host := hostName(addr); host != "" {
		s.hostsMu.Lock()
		s.hosts[host] = true
		s.hostsMu.Unlock()
	}
	s.ln = s.admit.listener(ln)
	return ln.Addr(), nil
}

// Run serves on the listener bound by Listen until ctx ends, then shuts
// down: it stops accepting connections, ends in-flight long-polls at once
// (they answer with the current view), and waits up to
// Options.ShutdownTimeout for other requests (a commit in flight completes).
// It returns nil after a shutdown caused by ctx.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln == nil {
		return errors.New("httpapi: call Listen before Run")
	}
	defer s.worker.close() // once every request has ended
	srv := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		ConnState:         s.admit.connState,
		ConnContext:       connContext,
		// No ReadTimeout: it would count the headers' time against the
		// body's; bodyDeadline gives a body its own budget once the
		// headers are in. No WriteTimeout: long-polls legitimately last
		// up to MaxLongPoll.
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		s.close()
		return fmt.Errorf("serve http api on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		s.log.Warn().Err(err).Msg("http api: requests still running after the shutdown timeout; closing them")
		_ = srv.Close()
	}
	<-served // returns http.ErrServerClosed once Shutdown or Close began
	return nil
}

// routes builds the router. Every request has its Host checked and its body
// read under a deadline, every POST is refused when a browser sends it from
// another origin, and every route but /healthz and /readyz is behind the
// token check.
func (s *Server) routes() *chi.Mux {
	r := chi.NewRouter()
	r.Use(s.bodyDeadline, s.logRequests, s.recoverPanics, s.checkHost, s.checkOrigin)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, http.StatusNotFound, api.CodeNotFound,
			fmt.Sprintf("no route %s %s; see docs/api.md for the API's routes", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			if r.Match(chi.NewRouteContext(), m, req.URL.Path) {
				allowed = append(allowed, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		s.writeError(w, req, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed,
			fmt.Sprintf("%s is not allowed on %s; use %s", req.Method, req.URL.Path, strings.Join(allowed, " or ")))
	})

	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Group(func(r chi.Router) {
		r.Use(s.authenticate, s.admitRequests)
		r.Get("/assignment", s.assignment)
		r.Post("/tasks/{id}/release", s.release)
		r.Get("/tasks/{id}/state", s.scan)
		r.Get("/tasks/{id}/state/*", s.get)
		r.With(s.requireBody).Post("/tasks/{id}/get", s.getMany)
		r.With(s.requireBody).Post("/tasks/{id}/commit", s.commit)
		r.Get("/query/tasks/{id}/state", s.queryScan)
		r.Get("/query/tasks/{id}/state/*", s.queryGet)
		r.With(s.requireBody).Post("/query/tasks/{id}/get", s.queryGetMany)
		r.Post("/leave", s.leave)
		r.Get("/leave", s.leaveStatus)
		r.Get("/group", s.group)
		r.Get("/metrics", s.metrics)
	})
	return r
}

// authenticate checks the bearer token in constant time. Hashing both sides
// first keeps the comparison's time independent of the token's length too.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.opts.Token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		scheme, token, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="handoff"`)
			s.writeError(w, r, http.StatusUnauthorized, api.CodeUnauthorized,
				`this agent requires a token: send "Authorization: Bearer <token>" (the agent's --api-token)`)
			return
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
		if subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="handoff", error="invalid_token"`)
			s.writeError(w, r, http.StatusUnauthorized, api.CodeUnauthorized,
				"the bearer token does not match the agent's --api-token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// logRequests logs each request at debug level once it is answered.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.log.GetLevel() > zerolog.DebugLevel {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		s.log.Debug().Str(fieldMethod, r.Method).Str(fieldPath, r.URL.Path).
			Int(fieldStatus, status).Dur(fieldDuration, time.Since(start)).Msg("http request")
	})
}

// recoverPanics turns a handler's panic into a logged 500 instead of a
// dropped connection.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error().Str(fieldMethod, r.Method).Str(fieldPath, r.URL.Path).
					Interface("panic", p).Msg("http api handler panicked")
				s.writeError(w, r, http.StatusInternalServerError, api.CodeInternal,
					"internal error; the agent logged the details")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

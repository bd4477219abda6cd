package httpapi

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/handoffhq/handoff/api"
)

// The API is meant for the worker next to the agent, but any program on the
// host can reach it, web browsers included. These guards keep a web page
// from driving it: the Host check defeats DNS rebinding (a page whose name
// resolves to 127.0.0.1), the Origin check defeats cross-site POSTs, and
// the JSON check keeps form and text/plain bodies (which a page can send
// without asking) out of commits. The body deadline keeps slow clients from
// holding connections.

// hostName returns the lower-case host of a Host header or listen address,
// without port, brackets or a final dot.
func hostName(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimPrefix(strings.TrimSuffix(host, "]"), "[")
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// hostAllowed reports whether host (a Host header) names this agent:
// localhost, an IP address (which no DNS answer can rebind), the listen
// address's host, or one of Options.AllowedHosts. The port is not checked:
// DNS rebinding changes the name, and a port forward or a published
// container port changes the port legitimately.
func (s *Server) hostAllowed(host string) bool {
	if s.anyHost {
		return true
	}
	name := hostName(host)
	switch {
	case name == "":
		return false
	case name == "localhost":
		return true
	case net.ParseIP(name) != nil:
		return true
	}
	s.hostsMu.RLock()
	defer s.hostsMu.RUnlock()
	return s.hosts[name]
}

// checkHost refuses a request whose Host header does not name this agent.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			s.writeError(w, r, http.StatusForbidden, api.CodeHostNotAllowed,
				fmt.Sprintf("Host %s is not this agent's name: call it as localhost, by IP address or by its listen address, "+
					"or allow the name with --api-allowed-hosts", quote(r.Host)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkOrigin refuses a POST that a browser sends from another origin
// (Sec-Fetch-Site or Origin say so). Programs send neither header.
func (s *Server) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.cross.Check(r); err != nil {
			s.writeError(w, r, http.StatusForbidden, api.CodeCrossOrigin,
				"a web page of another origin may not call this API; call it from the worker or a program, which send no Origin header")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bodyDeadline gives a request with a body Options.BodyReadTimeout to send
// it: a read past the deadline fails (readBody answers 408), and a body
// that a handler leaves unread cannot hold the connection. net/http lifts
// the deadline once the body has been read to its end (it then reads the
// connection in the background, to notice a client that leaves), so a
// commit that waits for NATS longer is not cut off.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			// A test's recorder has no connection, and nothing to bound.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.BodyReadTimeout))
			// While the body arrives, the connection may make room for a
			// new one (admission.go).
			s.admit.bodyStarted(r)
			r.Body = &trackedBody{ReadCloser: r.Body, done: func() { s.admit.bodyDone(r) }}
		}
		next.ServeHTTP(w, r)
	})
}

// readBody reads a request body of at most Options.MaxBodyBytes. what names
// the body in messages. On failure it has answered (413 too large, 408 too
// slow, 400 otherwise) and returns false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, what string) ([]byte, bool) {
	if b, ok := r.Body.(*bufferedBody); ok {
		return b.b, true // read by admitRequests
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes), r.ContentLength, s.opts.MaxBodyBytes)
	if err == nil {
		return body, true
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		s.writeError(w, r, http.StatusRequestEntityTooLarge, api.CodeTooLarge,
			fmt.Sprintf("the %s is over %d bytes; split it into smaller commits", what, s.opts.MaxBodyBytes))
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		s.writeError(w, r, http.StatusRequestTimeout, api.CodeTimeout,
			fmt.Sprintf("the %s did not arrive within %s; send the whole body at once", what, s.opts.BodyReadTimeout))
	default:
		s.writeError(w, r, http.StatusBadRequest, api.CodeInvalid, fmt.Sprintf("read the %s: %v", what, err))
	}
	return nil, false
}

package httpapi

import (
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/handoffhq/handoff/api"
)

// ProbeHandler returns the handler of a listener for monitoring alone (the
// agent's --metrics-listen): /metrics, /healthz and /readyz as the API
// serves them, and nothing else. It takes no token and checks no Host:
// nothing it serves is the worker's state or changes anything, and
// Prometheus and the kubelet reach it from outside the pod, which the
// worker's API, on a Unix socket or 127.0.0.1, may not let them.
func (s *Server) ProbeHandler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.logRequests, s.recoverPanics)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, http.StatusNotFound, api.CodeNotFound,
			fmt.Sprintf("no route %s %s on the metrics listener: it serves GET /metrics, /healthz and /readyz only; the worker's API is on the agent's --listen", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", http.MethodGet)
		s.writeError(w, r, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed,
			fmt.Sprintf("%s is not allowed on %s; use GET", r.Method, r.URL.Path))
	})
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Get("/metrics", s.metrics)
	return r
}

package client

import (
	"net/http/httptest"
	"testing"

	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

// serveFake serves f's API over HTTP for the test's lifetime.
func serveFake(t *testing.T, f *httpapitest.Backend, o httpapi.Options) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(httpapi.New(f, o).Handler())
	t.Cleanup(srv.Close)
	return srv
}

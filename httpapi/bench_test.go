package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

// benchBackend answers every read with a 100-byte value and acknowledges
// every commit: what is left is the API's own cost.
type benchBackend struct{ *httpapitest.Backend }

var benchValue = make([]byte, 100)

func (benchBackend) Get(string, []byte) ([]byte, error) { return benchValue, nil }
func (benchBackend) GetMany(_ string, keys [][]byte, _ int) ([][]byte, error) {
	out := make([][]byte, len(keys))
	for i := range out {
		out[i] = benchValue
	}
	return out, nil
}
func (benchBackend) Commit(_ context.Context, id string, req api.CommitRequest) (api.CommitResult, error) {
	return api.CommitResult{Task: id, Seq: 1, Epoch: req.Epoch}, nil
}

// BenchmarkRoundTrip measures one call of the API over loopback TCP, the
// server's middleware, routing, decoding and encoding included, next to a
// bare net/http round trip carrying the same bytes (floor). The client is
// net/http's, as the Go client's is.
//
//	go test ./httpapi -run XXX -bench RoundTrip
func BenchmarkRoundTrip(b *testing.B) {
	srv := httptest.NewServer(New(benchBackend{seeded()}, Options{}).Handler())
	defer srv.Close()
	floor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.RawQuery, "n="))
		w.Header()["Content-Type"] = []string{"application/octet-stream"}
		_, _ = w.Write(make([]byte, n))
	}))
	defer floor.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	keys := make([][]byte, 100)
	puts := make([]api.KV, 100)
	for i := range keys {
		keys[i] = []byte("h" + strconv.Itoa(10000000+i))
		puts[i] = api.KV{Key: keys[i], Value: benchValue}
	}
	getBody := api.AppendGetBinary(nil, keys)
	commitBody := api.AppendCommitBinary(nil, api.CommitRequest{Puts: puts, Epoch: 3})
	call := func(b *testing.B, method, url, ct, accept string, body []byte) {
		b.Helper()
		var rd io.Reader
		if body != nil {
			rd = strings.NewReader(string(body))
		}
		req, _ := http.NewRequest(method, url, rd)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s %s: %d", method, url, resp.StatusCode)
		}
	}
	for _, c := range []struct {
		name, method, url, ct, accept string
		body                          []byte
	}{
		{"read/floor", "GET", floor.URL + "/?n=100", "", "", nil},
		{"read/api", "GET", srv.URL + "/tasks/t1/state/a", "", "", nil},
		{"batch/floor", "POST", floor.URL + "/?n=" + strconv.Itoa(4+100*104), api.MediaBinary, "", getBody},
		{"batch/api", "POST", srv.URL + "/tasks/t1/get", api.MediaBinary, api.MediaBinary, getBody},
		{"commit/floor", "POST", floor.URL + "/?n=40", api.MediaBinary, "", commitBody},
		{"commit/api", "POST", srv.URL + "/tasks/t1/commit", api.MediaBinary, "", commitBody},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				call(b, c.method, c.url, c.ct, c.accept, c.body)
			}
		})
	}
}

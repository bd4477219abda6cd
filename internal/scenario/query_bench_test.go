package scenario

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
)

// BenchmarkQueries measures queries across processes, in one run on one
// group of three members (agents as processes, the input flowing): the
// latency of one query at a time answered from the asked member's own
// copy (local) and routed over NATS to another member's (routed), by
// bound, and the throughput of routed queries with many in flight. It
// reports p50 and p99 of each and the routed reads per second; the
// targets are a routed p50 within 1 ms of the local one and 20 k routed
// reads/s.
//
//	go test ./internal/scenario -run XXX -bench Queries -benchtime 1x -v
func BenchmarkQueries(b *testing.B) {
	for range b.N {
		h := New(b, DefaultOptions())
		h.Start(3)
		gv := h.mustGroup()
		var task, owner, other string
		for _, gt := range gv.Tasks {
			if gt.Stateful {
				task, owner = gt.ID, gt.Active
				break
			}
		}
		for _, id := range []string{"m1", "m2", "m3"} {
			if id != owner {
				other = id
				break
			}
		}
		cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		get := func(m, bound string) (routed bool, err error) {
			resp, err := cl.Get(h.Member(m).URL() + "/query/tasks/" + task + "/state/k1" + bound)
			if err != nil {
				return false, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
				return false, fmt.Errorf("status %d", resp.StatusCode)
			}
			return resp.Header.Get(api.HeaderRouted) == "true", nil
		}
		const n = 2000
		for _, bound := range []struct{ name, q string }{{"default", ""}, {"max_lag", "?max_lag=100"}} {
			lat := map[bool][]time.Duration{}
			for i := 0; i < n; i++ {
				for _, m := range []string{owner, other} { // interleaved: the same load for both
					t0 := time.Now()
					routed, err := get(m, bound.q)
					if err != nil {
						b.Fatal(err)
					}
					lat[routed] = append(lat[routed], time.Since(t0))
				}
			}
			for _, routed := range []bool{false, true} {
				ds := lat[routed]
				slices.Sort(ds)
				if len(ds) == 0 {
					b.Fatalf("%s: no %v answers", bound.name, routed)
				}
				name := map[bool]string{false: "local", true: "routed"}[routed]
				p50, p99 := ds[len(ds)/2], ds[len(ds)*99/100]
				b.ReportMetric(float64(p50.Microseconds()), "µs-p50-"+name+"-"+bound.name)
				b.ReportMetric(float64(p99.Microseconds()), "µs-p99-"+name+"-"+bound.name)
				h.Logf("%s, %s: %d queries, p50 %s, p99 %s", bound.name, name, len(ds), p50, p99)
			}
		}
		// Throughput: many queries in flight for 5 s each: routed through
		// the member without the copy, local on the owner (the same HTTP
		// path, no NATS round trip), and the NATS path alone (the protocol
		// handoff query speaks, no HTTP).
		req, err := group.NewRequester(h.nc, h.opts.Group)
		if err != nil {
			b.Fatal(err)
		}
		defer req.Close()
		for _, run := range []struct {
			name string
			ask  func() (bool, error)
		}{
			{"routed-default", func() (bool, error) { return get(other, "") }},
			{"routed-max_lag", func() (bool, error) { return get(other, "?max_lag=100") }},
			{"local-max_lag", func() (bool, error) { r, err := get(owner, "?max_lag=100"); return !r, err }},
			{"nats-max_lag", func() (bool, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := req.Ask(ctx, task, group.QueryRequest{Kind: api.QueryGet, Bound: api.Bound{Lagged: true, MaxLag: 100}, Keys: [][]byte{[]byte("k1")}})
				return true, err
			}},
		} {
			var done, counted atomic.Int64
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var wg sync.WaitGroup
			start := time.Now()
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						ok, err := run.ask()
						if err != nil {
							return
						}
						done.Add(1)
						if ok {
							counted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			cancel()
			el := time.Since(start).Seconds()
			b.ReportMetric(float64(counted.Load())/el, "reads/s-"+run.name)
			h.Logf("%s: %d queries in %.1fs, %d as named: %.0f reads/s", run.name, done.Load(), el, counted.Load(), float64(counted.Load())/el)
		}
	}
}

package agent_test

import (
	"context"
	"fmt"
	"math/rand"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/record"
)

// BenchmarkPlannedHandoff moves tasks to a joining member and back on its
// leave, over and over under continuous commits, and reports the hand-off
// pause (release to the next owner's worker starting the task) and the
// leader's promotion delay (learner caught up to revoke published).
//
//	go test ./agent -run XXX -bench PlannedHandoff -benchtime 10x
func BenchmarkPlannedHandoff(b *testing.B) {
	cfg := testConfig("orders-0..9", "")
	cfg.ReleaseTimeout = cfgDuration(30 * time.Second)
	c := newCluster(b, cfg)
	leaderReg := prometheus.NewRegistry()
	c.registry = map[string]*prometheus.Registry{"m1": leaderReg}
	c.start("m1")
	w1 := c.startWorker("m1")
	poll.Eventually(b, 20*time.Second, "m1 running everything", func() error { return w1.running(c.view()) })

	var events []record.Event
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.start("m2")
		w2 := c.startWorker("m2")
		poll.Eventually(b, 30*time.Second, "half the tasks on m2", func() error {
			gv := c.view()
			if err := balanced(gv, "m1", "m2"); err != nil {
				return err
			}
			return w2.running(gv)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, err := c.members["m2"].a.Leave(ctx); err != nil {
			b.Fatal(err)
		}
		if err := c.members["m2"].a.WaitDone(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		poll.Eventually(b, 30*time.Second, "everything back on m1", func() error { return w1.running(c.view()) })
		w2.stop()
		ev, _ := w2.snapshot()
		events = append(events, ev...)
		c.stop("m2")
	}
	b.StopTimer()
	ev, _ := w1.snapshot()
	events = append(events, ev...)
	pauses := movePauses(events)
	if testing.Verbose() {
		for _, r := range events {
			if r.Type == client.EventRelease || r.Type == client.EventStart {
				b.Logf("%s %s %s e%d", r.Time.Format("15:04:05.000000"), r.Type, r.Task, r.Epoch)
			}
		}
	}
	sort.Slice(pauses, func(i, j int) bool { return pauses[i] < pauses[j] })
	if len(pauses) == 0 {
		b.Fatal("no hand-off recorded")
	}
	b.ReportMetric(float64(len(pauses)), "moves")
	b.ReportMetric(ms(quantile(pauses, 0.50)), "pause-p50-ms")
	b.ReportMetric(ms(quantile(pauses, 0.99)), "pause-p99-ms")
	b.ReportMetric(ms(pauses[len(pauses)-1]), "pause-max-ms")
	p50, p99, n := histogramQuantiles(b, leaderReg, "handoff_promotion_delay_seconds")
	b.ReportMetric(float64(n), "promotions")
	b.ReportMetric(p50*1000, "promotion-p50-le-ms")
	b.ReportMetric(p99*1000, "promotion-p99-le-ms")
}

// BenchmarkHTTPCommit commits batches of 100 records through the HTTP API
// (client → httpapi → fenced append → Pebble), one task per goroutine.
//
//	go test ./agent -run XXX -bench HTTPCommit -benchtime 3s
func BenchmarkHTTPCommit(b *testing.B) {
	for _, par := range []int{1, 4} {
		b.Run(fmt.Sprintf("tasks=%d", par), func(b *testing.B) {
			cfg := testConfig("orders-0.."+strconv.Itoa(par-1), "")
			c := newCluster(b, cfg)
			c.start("m1")
			srv := httptest.NewServer(httpapi.New(c.members["m1"].a, httpapi.Options{}).Handler())
			defer srv.Close()
			cl := client.New(srv.URL)
			poll.Eventually(b, 20*time.Second, "tasks active", func() error { return c.activeEverywhere(c.view()) })
			puts := make([]api.KV, 100)
			for i := range puts {
				puts[i] = api.KV{Key: []byte(fmt.Sprintf("key-%014d", i)), Value: make([]byte, 100)}
			}
			var (
				mu    sync.Mutex
				lats  []time.Duration
				next  atomic.Int64
				total atomic.Int64
			)
			b.SetParallelism(1)
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N/par + 1
			for w := 0; w < par; w++ {
				task := "orders-" + strconv.Itoa(int(next.Add(1)-1))
				wg.Add(1)
				go func() {
					defer wg.Done()
					local := make([]time.Duration, 0, per)
					for i := 0; i < per; i++ {
						t0 := time.Now()
						if _, err := cl.Commit(context.Background(), task, api.CommitRequest{Puts: puts, Checkpoint: []byte(strconv.Itoa(i))}); err != nil {
							b.Error(err)
							return
						}
						local = append(local, time.Since(t0))
						total.Add(100)
					}
					mu.Lock()
					lats = append(lats, local...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			b.StopTimer()
			sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
			b.ReportMetric(float64(total.Load())/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(ms(quantile(lats, 0.50)), "p50-ms")
			b.ReportMetric(ms(quantile(lats, 0.99)), "p99-ms")
		})
	}
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q * float64(len(d)-1))
	return d[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// histogramQuantiles returns the upper bounds of the buckets holding the
// median and the 99th percentile, and the count.
func histogramQuantiles(b *testing.B, reg *prometheus.Registry, name string) (p50, p99 float64, n uint64) {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		n = h.GetSampleCount()
		for _, bk := range h.GetBucket() {
			c := float64(bk.GetCumulativeCount())
			if p50 == 0 && c >= 0.5*float64(n) {
				p50 = bk.GetUpperBound()
			}
			if p99 == 0 && c >= 0.99*float64(n) {
				p99 = bk.GetUpperBound()
			}
		}
	}
	return p50, p99, n
}

// BenchmarkHTTPStatePath is the worker's path to its state through the
// HTTP API, one task of 10,000 keys of 100 B, with the record cache off and
// on, in turns: "get" is a batch get of the distinct keys of 100 events on
// zipf keys (binary); "rmw" the read-modify-write worker's batch, that get
// and then a commit of the keys' new values. Its keys/s and events/s, and
// the CPU it reports, are the agent's, the client's and the embedded
// server's together.
//
//	go test ./agent -run XXX -bench HTTPStatePath -benchtime 2000x -count 3
func BenchmarkHTTPStatePath(b *testing.B) {
	const keys = 10_000
	for _, op := range []string{"get", "rmw"} {
		for _, cache := range []string{"off", "on"} {
			b.Run(fmt.Sprintf("op=%s/cache=%s", op, cache), func(b *testing.B) {
				c := newCluster(b, testConfig("orders-0", ""))
				if cache == "off" {
					c.agentOptions = func(_ string, o *agent.Options) { o.RecordCacheBytes = -1 }
				}
				c.start("m1")
				srv := httptest.NewServer(httpapi.New(c.members["m1"].a, httpapi.Options{}).Handler())
				defer srv.Close()
				cl := client.New(srv.URL)
				poll.Eventually(b, 20*time.Second, "task active", func() error { return c.activeEverywhere(c.view()) })
				ctx := context.Background()
				key := func(i uint64) []byte { return fmt.Appendf(nil, "key-%014d", i) }
				for i := uint64(0); i < keys; i += 1000 {
					puts := make([]api.KV, 1000)
					for j := range puts {
						puts[j] = api.KV{Key: key(i + uint64(j)), Value: make([]byte, 100)}
					}
					if _, err := cl.Commit(ctx, "orders-0", api.CommitRequest{Puts: puts}); err != nil {
						b.Fatal(err)
					}
				}
				zipf := rand.NewZipf(rand.New(rand.NewSource(1)), 1.01, 1, keys-1)
				batch := func() [][]byte {
					seen := map[uint64]bool{}
					var ks [][]byte
					for range 100 {
						if k := zipf.Uint64() * 7919 % keys; !seen[k] {
							seen[k] = true
							ks = append(ks, key(k))
						}
					}
					return ks
				}
				for range 200 { // warm: the cache, and Pebble's own
					if _, err := cl.GetMany(ctx, "orders-0", batch()); err != nil {
						b.Fatal(err)
					}
				}
				read := 0
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					ks := batch()
					read += len(ks)
					vals, err := cl.GetMany(ctx, "orders-0", ks)
					if err != nil {
						b.Fatal(err)
					}
					if op == "get" {
						continue
					}
					puts := make([]api.KV, len(ks))
					for j, k := range ks {
						v := append([]byte(nil), vals[j]...)
						v[0]++
						puts[j] = api.KV{Key: k, Value: v}
					}
					if _, err := cl.Commit(ctx, "orders-0", api.CommitRequest{Puts: puts}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "keys/s")
				if op == "rmw" {
					b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "events/s")
				}
			})
		}
	}
}

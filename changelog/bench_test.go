package changelog_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/natstest"
	"github.com/handoffhq/handoff/statestore"
)

// BenchmarkCommit measures the agent's commit path: a fenced append of one
// entry, then its apply to the store (on disk, NoSync), for entries of 1, 10
// and 100 records of 18 B keys and 100 B values. "sequential" commits one
// task after the other; "parallel" commits to several tasks at once, each
// task sequentially (appends to one task cannot be pipelined).
func BenchmarkCommit(b *testing.B) {
	srv := natstest.Start(b)
	js := srv.JetStream(b)
	l, err := changelog.Open(context.Background(), js, changelog.Options{Group: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	store, err := statestore.Open(b.TempDir(), statestore.Options{Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	var taskID atomic.Int64

	for _, mode := range []string{"sequential", "parallel"} {
		for _, records := range []int{1, 10, 100} {
			b.Run(fmt.Sprintf("%s/records=%d", mode, records), func(b *testing.B) {
				entry := benchEntry(records)
				var mu sync.Mutex
				var lat []time.Duration
				commits := func(n func() bool) {
					task := fmt.Sprintf("t%d", taskID.Add(1))
					var last uint64
					var mine []time.Duration
					for n() {
						start := time.Now()
						seq, err := l.Append(context.Background(), task, last, entry)
						if err != nil {
							b.Error(err)
							return
						}
						if err := store.Apply(task, statestore.Commit{Seq: seq, Epoch: entry.Epoch, Checkpoint: entry.Checkpoint, Puts: entry.Puts, Deletes: entry.Deletes}); err != nil {
							b.Error(err)
							return
						}
						last = seq
						mine = append(mine, time.Since(start))
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}
				start := time.Now()
				if mode == "sequential" {
					i := 0
					commits(func() bool { i++; return i <= b.N })
				} else {
					b.SetParallelism(4) // 4 × GOMAXPROCS tasks
					b.RunParallel(func(pb *testing.PB) { commits(pb.Next) })
				}
				elapsed := time.Since(start)
				if len(lat) == 0 {
					return
				}
				slices.Sort(lat)
				b.ReportMetric(float64(len(lat)*records)/elapsed.Seconds(), "records/s")
				b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "commits/s")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}

func benchEntry(records int) changelog.Entry {
	e := changelog.Entry{Kind: changelog.KindCommit, Epoch: 1, Checkpoint: []byte("offset-0000000042")}
	for i := range records {
		e.Puts = append(e.Puts, statestore.KV{Key: fmt.Appendf(nil, "key-%014d", i), Value: make([]byte, 100)})
	}
	return e
}

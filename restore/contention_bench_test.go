package restore_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/statestore"
)

// BenchmarkApplyBehindRestore measures what a restore's batches cost a
// small write to the same store, as a successor's first apply or a commit
// meets a learner's replay of another task: one goroutine applies batches
// of the given size (records of 18 + 100 B) as fast as it can, while the
// benchmark applies one-record commits to another task and reports their
// p50 and p99, and the restore's rate, in the same run. "none" is the same
// small write with no restore.
func BenchmarkApplyBehindRestore(b *testing.B) {
	for _, size := range []int{0, 256 << 10, 1 << 20, 4 << 20} {
		name := "none"
		if size > 0 {
			name = fmt.Sprintf("batch=%dKiB", size>>10)
		}
		b.Run(name, func(b *testing.B) {
			s, err := statestore.Open(b.TempDir(), statestore.Options{Logger: zerolog.Nop(), MinFree: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const recLen = 18 + 100
			batch := make([]statestore.KV, max(size/recLen, 1))
			for i := range batch {
				batch[i] = statestore.KV{Key: fmt.Appendf(nil, "k%017d", i), Value: make([]byte, 100)}
			}
			var (
				stop     atomic.Bool
				wg       sync.WaitGroup
				restored atomic.Uint64
			)
			started := time.Now()
			if size > 0 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for seq := uint64(1); !stop.Load(); seq++ {
						if err := s.Apply("bulk", statestore.Commit{Seq: seq, Epoch: 1, Puts: batch}); err != nil {
							b.Error(err)
							return
						}
						restored.Add(uint64(len(batch)))
					}
				}()
			}
			lat := make([]time.Duration, 0, b.N)
			// A commit's pace, not a tight loop: a millisecond after each.
			pace := time.NewTimer(0)
			<-pace.C
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				if err := s.Apply("t", statestore.Commit{Seq: uint64(i + 1), Epoch: 1, Puts: batch[:1]}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				pace.Reset(time.Millisecond)
				<-pace.C
			}
			b.StopTimer()
			stop.Store(true)
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(restored.Load())/time.Since(started).Seconds(), "restore-rec/s")
		})
	}
}

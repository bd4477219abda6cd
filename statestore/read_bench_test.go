package statestore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rs/zerolog"
)

// benchKeys is how many keys of 100 B each task of the benchmarks holds.
const benchKeys = 100_000

func benchKey(i int) []byte { return fmt.Appendf(nil, "h%08d", i) }

// loadedStore opens a store in a temporary directory holding benchKeys
// keys in each of tasks, written 1,000 to a commit, and returns it with
// the last sequence it applied.
func loadedStore(b *testing.B, tasks ...string) (*Store, uint64) {
	b.Helper()
	s, err := Open(b.TempDir(), Options{MinFree: -1, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	seq := uint64(0)
	for _, task := range tasks {
		for i := 0; i < benchKeys; i += 1000 {
			seq++
			c := Commit{Seq: seq, Epoch: 1}
			for j := i; j < i+1000; j++ {
				c.Puts = append(c.Puts, KV{Key: benchKey(j), Value: make([]byte, 100)})
			}
			if err := s.Apply(task, c); err != nil {
				b.Fatal(err)
			}
		}
	}
	return s, seq
}

// BenchmarkReads measures the reads the API serves on a task of 100,000
// keys of 100 B: one key (Get), and 100 random keys at once (GetMany,
// read from one snapshot), while the state is in the memtable and once
// it is flushed to sstables.
//
//	go test ./statestore -run XXX -bench Reads
func BenchmarkReads(b *testing.B) {
	s, _ := loadedStore(b, "t")
	rng := rand.New(rand.NewPCG(1, 2))
	for _, where := range []string{"memtable", "flushed"} {
		if where == "flushed" {
			if err := s.db.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(where+"/Get", func(b *testing.B) {
			for range b.N {
				if _, err := s.Get("t", benchKey(rng.IntN(benchKeys))); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(where+"/GetMany100", func(b *testing.B) {
			ks := make([][]byte, 100)
			for range b.N {
				for j := range ks {
					ks[j] = benchKey(rng.IntN(benchKeys))
				}
				if _, err := s.GetMany("t", ks, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApplyLoaded commits 100 records of random keys to a store that
// already holds 800,000 keys (8 tasks of 100,000), as a worker's commits
// land on a restored store.
//
//	go test ./statestore -run XXX -bench ApplyLoaded
func BenchmarkApplyLoaded(b *testing.B) {
	tasks := make([]string, 8)
	for i := range tasks {
		tasks[i] = fmt.Sprintf("orders-%d", i)
	}
	s, seq := loadedStore(b, tasks...)
	rng := rand.New(rand.NewPCG(1, 2))
	puts := make([]KV, 100)
	b.ResetTimer()
	for range b.N {
		seq++
		for j := range puts {
			puts[j] = KV{Key: benchKey(rng.IntN(benchKeys)), Value: make([]byte, 100)}
		}
		if err := s.Apply("orders-3", Commit{Seq: seq, Epoch: 1, Puts: puts}); err != nil {
			b.Fatal(err)
		}
	}
}

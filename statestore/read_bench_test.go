package statestore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rs/zerolog"
)

// BenchmarkReads measures the reads the API serves on a task of 100,000
// keys of 100 B: one key (Get), and 100 random keys at once (GetMany,
// read from one snapshot).
//
//	go test ./statestore -run XXX -bench Reads
func BenchmarkReads(b *testing.B) {
	s, err := Open(b.TempDir(), Options{MinFree: -1, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const keys = 100_000
	key := func(i int) []byte { return fmt.Appendf(nil, "h%08d", i) }
	for i := 0; i < keys; i += 1000 {
		c := Commit{Seq: uint64(i/1000 + 1), Epoch: 1}
		for j := i; j < i+1000; j++ {
			c.Puts = append(c.Puts, KV{Key: key(j), Value: make([]byte, 100)})
		}
		if err := s.Apply("t", c); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, where := range []string{"memtable", "flushed"} {
		if where == "flushed" {
			if err := s.db.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(where, func(b *testing.B) { benchReads(b, s, rng, keys, key) })
	}
}

func benchReads(b *testing.B, s *Store, rng *rand.Rand, keys int, key func(int) []byte) {
	b.Run("Get", func(b *testing.B) {
		for range b.N {
			if _, err := s.Get("t", key(rng.IntN(keys))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GetMany100", func(b *testing.B) {
		ks := make([][]byte, 100)
		for range b.N {
			for j := range ks {
				ks[j] = key(rng.IntN(keys))
			}
			if _, err := s.GetMany("t", ks, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkApplyLoaded commits 100 records of random keys to a store that
// already holds 800,000 keys (8 tasks of 100,000), as a worker's commits
// land on a restored store.
//
//	go test ./statestore -run XXX -bench ApplyLoaded
func BenchmarkApplyLoaded(b *testing.B) {
	s, err := Open(b.TempDir(), Options{MinFree: -1, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const keys = 100_000
	key := func(i int) []byte { return fmt.Appendf(nil, "h%08d", i) }
	seq := uint64(0)
	for t := range 8 {
		task := fmt.Sprintf("orders-%d", t)
		for i := 0; i < keys; i += 1000 {
			seq++
			c := Commit{Seq: seq, Epoch: 1}
			for j := i; j < i+1000; j++ {
				c.Puts = append(c.Puts, KV{Key: key(j), Value: make([]byte, 100)})
			}
			if err := s.Apply(task, c); err != nil {
				b.Fatal(err)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	puts := make([]KV, 100)
	b.ResetTimer()
	for range b.N {
		seq++
		for j := range puts {
			puts[j] = KV{Key: key(rng.IntN(keys)), Value: make([]byte, 100)}
		}
		if err := s.Apply("orders-3", Commit{Seq: seq, Epoch: 1, Puts: puts}); err != nil {
			b.Fatal(err)
		}
	}
}

package restore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/snapshot"
	"github.com/handoffhq/handoff/snapshot/local"
	"github.com/handoffhq/handoff/statestore"
)

// updateLog is a task's changelog of many updates over a fixed key space,
// appended once for BenchmarkSnapshot.
type updateLog struct {
	env      *env
	task     string
	keys     int
	updates  int // appended so far
	perMsg   int
	msgs     int
	bytes    int64
	last     uint64
	rng      *rand.Rand
	valPool  []byte
	appendAt time.Duration
}

// appendUpdates appends updates puts (perMsg to a message) to task: first
// every key once, in order, then keys at random. Values are 100 bytes.
// Messages carry the fence header with the previous message's sequence,
// as changelog.Append writes it: the stream holds only this subject, so
// sequences are predictable and the appends can be pipelined.
func appendUpdates(b *testing.B, e *env, task string, keys, updates, perMsg int) *updateLog {
	b.Helper()
	u := &updateLog{env: e, task: task, keys: keys, perMsg: perMsg, rng: rand.New(rand.NewPCG(3, 4)), valPool: make([]byte, 1<<20)}
	for i := range u.valPool {
		u.valPool[i] = byte(u.rng.Uint32())
	}
	start := time.Now()
	u.add(b, updates)
	u.appendAt = time.Since(start)
	return u
}

// add appends n more updates.
func (u *updateLog) add(b *testing.B, n int) {
	b.Helper()
	subject := u.env.log.Subject(u.task)
	var futures []jetstream.PubAckFuture
	en := changelog.Entry{Kind: changelog.KindCommit, Epoch: 1}
	var buf []byte
	for done := 0; done < n; {
		en.Puts = en.Puts[:0]
		for j := 0; j < u.perMsg && done < n; j++ {
			k := u.updates % u.keys
			if u.updates >= u.keys {
				k = u.rng.IntN(u.keys)
			}
			off := u.rng.IntN(len(u.valPool) - benchValueLen)
			en.Puts = append(en.Puts, statestore.KV{Key: fmt.Appendf(nil, "key-%014d", k), Value: u.valPool[off : off+benchValueLen]})
			u.updates++
			done++
		}
		en.Checkpoint = binary.AppendUvarint(en.Checkpoint[:0], uint64(u.updates))
		buf = changelog.Encode(buf[:0], en)
		msg := &nats.Msg{Subject: subject, Data: bytes.Clone(buf), Header: nats.Header{}}
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(u.last, 10))
		f, err := u.env.js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		futures = append(futures, f)
		u.last++
		u.msgs++
		u.bytes += int64(len(buf))
		if len(futures) == 4096 {
			u.wait(b, futures)
			futures = futures[:0]
		}
	}
	u.wait(b, futures)
}

// wait waits for the acknowledgements: a fence that did not hold fails.
func (u *updateLog) wait(b *testing.B, futures []jetstream.PubAckFuture) {
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
}

func diskStore(b *testing.B) *statestore.Store {
	b.Helper()
	s, err := statestore.Open(b.TempDir(), statestore.Options{Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkSnapshot measures, on one task of 1,000,000 keys (18 B keys,
// 100 B values) after 10,000,000 updates (100 a message; under -short
// 50,000 keys after 500,000 updates; SNAPBENCH_KEYS and SNAPBENCH_UPDATES
// override), in one run:
//   - restore/changelog: a new member's restore by replaying the whole
//     changelog;
//   - restore/snapshot: the same restore from the snapshot plus a suffix
//     of 100 messages (10,000 updates) appended after it;
//   - snapshot/write and snapshot/read: storing the task's snapshot from
//     Pebble (count, encode, put, read back its metadata) and reading it
//     back (decode, no Pebble);
//   - objstore/put and objstore/get: the object store's own put and get of
//     as many raw bytes as the snapshot has, for comparison.
//
// Run it with -benchtime=1x: the setup appends the whole changelog.
func BenchmarkSnapshot(b *testing.B) {
	keys, updates := 1_000_000, 10_000_000
	if testing.Short() {
		keys, updates = 50_000, 500_000
	}
	if v, err := strconv.Atoi(os.Getenv("SNAPBENCH_KEYS")); err == nil {
		keys = v
	}
	if v, err := strconv.Atoi(os.Getenv("SNAPBENCH_UPDATES")); err == nil {
		updates = v
	}
	const perMsg, suffixMsgs = 100, 100
	ctx := context.Background()
	e := newEnv(b)
	bucket := openBucket(b, e)
	u := appendUpdates(b, e, "bench", keys, updates, perMsg)
	b.Logf("appended %d updates of %d keys in %d messages (%.0f MB) in %s", updates, keys, u.msgs, float64(u.bytes)/1e6, u.appendAt.Round(time.Millisecond))

	// The writer's state, restored once (as the measured restore does).
	writer := diskStore(b)
	defer writer.Close()
	if _, err := restore.New(e.log, writer, restore.Options{Task: u.task}).Run(ctx); err != nil {
		b.Fatal(err)
	}

	b.Run("restore/changelog", func(b *testing.B) {
		var took time.Duration
		for range b.N {
			s := diskStore(b)
			r := restore.New(e.log, s, restore.Options{Task: u.task})
			start := time.Now()
			if _, err := r.Run(ctx); err != nil {
				b.Fatal(err)
			}
			took += time.Since(start)
			if p := r.Progress(); p.Records != uint64(updates) {
				b.Fatalf("replayed %d updates, want %d", p.Records, updates)
			}
			s.Close()
		}
		b.ReportMetric(took.Seconds()/float64(b.N), "s/restore")
		b.ReportMetric(float64(b.N)*float64(updates)/took.Seconds(), "updates/s")
		b.ReportMetric(0, "ns/op")
	})

	var info snapshot.Info
	b.Run("snapshot/write", func(b *testing.B) {
		var took, count time.Duration
		for range b.N {
			sn, ok, err := writer.Snapshot(u.task)
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			start := time.Now()
			if _, err := sn.Count(); err != nil {
				b.Fatal(err)
			}
			count += time.Since(start)
			start = time.Now()
			if info, err = local.Put(ctx, bucket, sn); err != nil {
				b.Fatal(err)
			}
			took += time.Since(start)
			sn.Close()
		}
		if info.Keys != uint64(keys) {
			b.Fatalf("snapshot has %d keys, want %d", info.Keys, keys)
		}
		b.ReportMetric(took.Seconds()/float64(b.N), "s/snapshot")
		b.ReportMetric(float64(b.N)*float64(info.Size)/1e6/took.Seconds(), "MB/s")
		b.ReportMetric(float64(b.N)*float64(keys)/took.Seconds(), "keys/s")
		b.ReportMetric(count.Seconds()/float64(b.N), "s/count")
		b.ReportMetric(float64(info.Size)/1e6, "MB")
		b.ReportMetric(0, "ns/op")
	})

	b.Run("snapshot/read", func(b *testing.B) {
		var took time.Duration
		for range b.N {
			start := time.Now()
			rd, err := bucket.Read(ctx, info)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for rd.Next() {
				n++
			}
			if err := rd.Err(); err != nil || n != keys {
				b.Fatalf("read %d keys: %v", n, err)
			}
			rd.Close()
			took += time.Since(start)
		}
		b.ReportMetric(float64(b.N)*float64(info.Size)/1e6/took.Seconds(), "MB/s")
		b.ReportMetric(float64(b.N)*float64(keys)/took.Seconds(), "keys/s")
		b.ReportMetric(0, "ns/op")
	})

	u.add(b, suffixMsgs*perMsg)
	b.Run("restore/snapshot", func(b *testing.B) {
		var took time.Duration
		for range b.N {
			s := diskStore(b)
			r := restore.New(e.log, s, restore.Options{Task: u.task, Snapshots: bucket})
			start := time.Now()
			if _, err := r.Run(ctx); err != nil {
				b.Fatal(err)
			}
			took += time.Since(start)
			if got, ok := r.LoadedSnapshot(); !ok || got.Seq != info.Seq {
				b.Fatalf("loaded %+v, want the snapshot", got)
			}
			if p := r.Progress(); p.Replayed != suffixMsgs {
				b.Fatalf("replayed %d messages after the snapshot, want %d", p.Replayed, suffixMsgs)
			}
			s.Close()
		}
		b.ReportMetric(took.Seconds()/float64(b.N), "s/restore")
		b.ReportMetric(0, "ns/op")
	})

	obs, err := e.js.ObjectStore(ctx, bucket.Name())
	if err != nil {
		b.Fatal(err)
	}
	raw := make([]byte, info.Size)
	for i := 0; i+8 <= len(raw); i += 8 {
		binary.LittleEndian.PutUint64(raw[i:], u.rng.Uint64())
	}
	b.Run("objstore/put", func(b *testing.B) {
		var took time.Duration
		for range b.N {
			start := time.Now()
			if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: "raw"}, bytes.NewReader(raw)); err != nil {
				b.Fatal(err)
			}
			took += time.Since(start)
		}
		b.ReportMetric(float64(b.N)*float64(len(raw))/1e6/took.Seconds(), "MB/s")
		b.ReportMetric(0, "ns/op")
	})
	b.Run("objstore/get", func(b *testing.B) {
		var took time.Duration
		for range b.N {
			start := time.Now()
			res, err := obs.Get(ctx, "raw")
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, res)
			if err != nil || n != int64(len(raw)) {
				b.Fatalf("got %d bytes: %v", n, err)
			}
			res.Close()
			took += time.Since(start)
		}
		b.ReportMetric(float64(b.N)*float64(len(raw))/1e6/took.Seconds(), "MB/s")
		b.ReportMetric(0, "ns/op")
	})
}

package restore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/statestore"
)

// benchData is a task's changelog appended once for the restore benchmarks.
// Its records are kept flat (no pointers) so that holding them does not
// slow the garbage collector during the measurements.
type benchData struct {
	env     *env
	task    string
	records int
	perMsg  int
	msgs    int
	bytes   int64  // message payload bytes
	keys    []byte // record i's key is keys[i*benchKeyLen:][:benchKeyLen]
	values  []byte // likewise with benchValueLen
}

const (
	benchKeyLen   = 18
	benchValueLen = 100
)

// appendBenchData appends records records, perMsg to a message, to task.
// Setup: unfenced async publishes, not timed.
func appendBenchData(b *testing.B, records, perMsg int) *benchData {
	b.Helper()
	e := newEnv(b)
	d := &benchData{env: e, task: "bench", records: records, perMsg: perMsg,
		keys: make([]byte, 0, records*benchKeyLen), values: make([]byte, records*benchValueLen)}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range d.values {
		d.values[i] = byte(rng.Uint32())
	}
	for i := range records {
		d.keys = fmt.Appendf(d.keys, "key-%014d", i)
	}
	subject := e.log.Subject(d.task)
	futures := make([]jetstream.PubAckFuture, 0, records/perMsg+1)
	for i := 0; i < records; i += perMsg {
		en := changelog.Entry{Kind: changelog.KindCommit, Epoch: 1, Checkpoint: binary.AppendUvarint(nil, uint64(i))}
		for j := i; j < min(i+perMsg, records); j++ {
			en.Puts = append(en.Puts, d.record(j))
		}
		data := changelog.Encode(nil, en)
		d.bytes += int64(len(data))
		f, err := e.js.PublishAsync(subject, data, jetstream.WithStallWait(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		futures = append(futures, f)
		d.msgs++
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	return d
}

func (d *benchData) record(i int) statestore.KV {
	return statestore.KV{
		Key:   d.keys[i*benchKeyLen : (i+1)*benchKeyLen],
		Value: d.values[i*benchValueLen : (i+1)*benchValueLen],
	}
}

// BenchmarkRestore measures, on the same data and interleaved in the same
// run, (a) raw JetStream replay of the task's subject (ordered consumer,
// bytes-bounded pulls, no decoding), (b) raw Pebble batch ingest of the same
// records (same Pebble settings and batch size as the store) and (c) a full
// restore, and reports (c) as a percentage of the lower of (a) and (b).
// 1,000,000 records of 18 B keys and 100 B values (100,000 under -short),
// 100 records a message; and 200,000 (20,000) one-record messages.
func BenchmarkRestore(b *testing.B) {
	for _, c := range []struct{ records, perMsg int }{{1_000_000, 100}, {200_000, 1}} {
		if testing.Short() {
			c.records /= 10
		}
		b.Run(fmt.Sprintf("records=%d/perMsg=%d", c.records, c.perMsg), func(b *testing.B) {
			benchmarkRestore(b, c.records, c.perMsg)
		})
	}
}

func benchmarkRestore(b *testing.B, records, perMsg int) {
	d := appendBenchData(b, records, perMsg)
	var tJS, tPebble, tRestore time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		replayRaw(b, d)
		tJS += time.Since(start)

		tPebble += ingestRaw(b, d)

		b.StopTimer()
		store, err := statestore.Open(b.TempDir(), statestore.Options{Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		r := restore.New(d.env.log, store, restore.Options{Task: d.task})
		b.StartTimer()
		start = time.Now()
		if _, err := r.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
		tRestore += time.Since(start)
		b.StopTimer()
		if p := r.Progress(); p.Records != uint64(d.records) || !p.CaughtUp {
			b.Fatalf("restored %+v, want %d records", p, d.records)
		}
		store.Close()
		b.StartTimer()
	}
	n := float64(b.N)
	rate := func(t time.Duration) float64 { return n * float64(d.records) / t.Seconds() }
	mbps := func(t time.Duration) float64 { return n * float64(d.bytes) / 1e6 / t.Seconds() }
	b.ReportMetric(rate(tJS), "js-records/s")
	b.ReportMetric(mbps(tJS), "js-MB/s")
	b.ReportMetric(rate(tPebble), "pebble-records/s")
	b.ReportMetric(mbps(tPebble), "pebble-MB/s")
	b.ReportMetric(rate(tRestore), "records/s")
	b.ReportMetric(mbps(tRestore), "MB/s")
	b.ReportMetric(100*rate(tRestore)/min(rate(tJS), rate(tPebble)), "%ceiling")
	b.ReportMetric(0, "ns/op")
}

// replayRaw reads the task's subject to its end as a restore does, without
// decoding or applying.
func replayRaw(b *testing.B, d *benchData) {
	cons, err := d.env.log.Stream().OrderedConsumer(context.Background(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{d.env.log.Subject(d.task)},
	})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	var n int
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		md, err := msg.Metadata()
		if err != nil {
			b.Error(err)
			return
		}
		n++
		if md.NumPending == 0 {
			close(done)
		}
	}, jetstream.PullMaxBytes(restore.DefaultPullMaxBytes))
	if err != nil {
		b.Fatal(err)
	}
	<-done
	cc.Stop()
	if n != d.msgs {
		b.Fatalf("replayed %d messages, want %d", n, d.msgs)
	}
}

// ingestRaw writes the records into a fresh Pebble database in batches of
// restore's default size, as the store does, and returns how long it took.
func ingestRaw(b *testing.B, d *benchData) time.Duration {
	db, err := pebble.Open(b.TempDir(), &pebble.Options{Logger: quietPebble{}, MemTableSize: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	start := time.Now()
	perBatch := restore.DefaultMaxBatchBytes / (benchKeyLen + benchValueLen) // records
	for i := 0; i < d.records; i += perBatch {
		n := min(perBatch, d.records-i)
		batch := db.NewBatchWithSize(n * (benchKeyLen + benchValueLen + 16))
		for j := i; j < i+n; j++ {
			kv := d.record(j)
			if err := batch.Set(kv.Key, kv.Value, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
		batch.Close()
	}
	return time.Since(start)
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)         {}
func (quietPebble) Errorf(string, ...any)        {}
func (quietPebble) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

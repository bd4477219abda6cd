package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/lab"
	"github.com/handoffhq/handoff/statestore"
)

// scenarioState measures the worker's path to its state: single reads,
// batch reads, commits and a read-modify-write worker, through the API in
// each encoding and on each transport, each next to the floor (a bare
// net/http round trip moving the same bytes on the same transport) and to
// Pebble's own in this process, all in the same run.
const scenarioState = "state"

// stateValueSize is the size of every value of the state scenario.
const stateValueSize = 100

// The operations of the state scenario.
const (
	opRead   = "read"
	opBatch  = "batch read"
	opCommit = "commit"
	opRMW    = "read-modify-write"
)

// What a row's operations go to.
const (
	viaAPI    = "api"
	viaFloor  = "floor"
	viaPebble = "pebble"
)

// StateSettings are the state scenario's flags.
type StateSettings struct {
	Keys       int           `json:"keys"`
	Tasks      []int         `json:"tasks"`
	Batch      int           `json:"batch"`
	Transports []string      `json:"transports"`
	Encodings  []string      `json:"encodings"`
	Ops        []string      `json:"ops"`
	Duration   time.Duration `json:"-"`
	DurationS  string        `json:"duration"`

	tasks, transports, encodings, ops string
}

// stateOps maps the names --state-ops takes to the operations.
var stateOps = map[string]string{"read": opRead, "batch": opBatch, "commit": opCommit, "rmw": opRMW}

// stateFlags registers the state scenario's flags, and the floor's.
func stateFlags(fs *flag.FlagSet, st *StateSettings, serveFloor *string) {
	fs.IntVar(&st.Keys, "state-keys", 100_000, "state scenario: keys of 100 B per task, loaded before the run")
	fs.StringVar(&st.tasks, "state-tasks", "1,8", "state scenario: comma-separated `counts` of tasks used in parallel, one after the other")
	fs.IntVar(&st.Batch, "state-batch", 100, "state scenario: keys per batch read, records per commit, and events per batch of the read-modify-write worker")
	fs.StringVar(&st.transports, "state-transports", "tcp,unix", "state scenario: the API's transports to measure: tcp (loopback), unix (a Unix socket)")
	fs.StringVar(&st.encodings, "state-encodings", "json,binary", "state scenario: the bodies to measure: json, binary")
	fs.StringVar(&st.ops, "state-ops", "read,batch,commit,rmw", "state scenario: the operations to measure: read (one key), batch (a batch read), commit, rmw (the read-modify-write worker: a batch read, then a commit)")
	fs.DurationVar(&st.Duration, "state-duration", 2*time.Second, "state scenario: how long each row runs")
	fs.StringVar(serveFloor, "serve-floor", "", "serve the state scenario's floor (a bare net/http server) on 127.0.0.1 and on `DIR`/floor.sock until stopped; the state scenario starts it itself with --processes")
}

// parseState checks the state scenario's flags.
func parseState(st *StateSettings) error {
	st.Tasks = nil
	for _, f := range strings.Split(st.tasks, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("--state-tasks %q: use counts of 1 or more, like 1,8", st.tasks)
		}
		st.Tasks = append(st.Tasks, n)
	}
	var err error
	if st.Transports, err = names("--state-transports", st.transports, "tcp", "unix"); err != nil {
		return err
	}
	if st.Encodings, err = names("--state-encodings", st.encodings, "json", "binary"); err != nil {
		return err
	}
	ops, err := names("--state-ops", st.ops, "read", "batch", "commit", "rmw")
	if err != nil {
		return err
	}
	st.Ops = nil
	for _, o := range ops {
		st.Ops = append(st.Ops, stateOps[o])
	}
	switch {
	case st.Keys < 1:
		return fmt.Errorf("--state-keys %d: use at least 1", st.Keys)
	case st.Batch < 1 || st.Batch > api.DefaultMaxGetKeys:
		return fmt.Errorf("--state-batch %d: use 1 to %d", st.Batch, api.DefaultMaxGetKeys)
	case st.Duration <= 0:
		return errors.New("--state-duration must be positive")
	}
	st.DurationS = st.Duration.String()
	return nil
}

// names parses a comma-separated list of some of known.
func names(flagName, list string, known ...string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(list, ",") {
		switch n = strings.TrimSpace(n); {
		case n == "":
		case slices.Contains(known, n):
			out = append(out, n)
		default:
			return nil, fmt.Errorf("%s: unknown %q; use %s", flagName, n, strings.Join(known, ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: name at least one of %s", flagName, strings.Join(known, ", "))
	}
	return out, nil
}

// stateResults is what the state scenario measured.
type stateResults struct {
	Settings Settings   `json:"settings"`
	Started  time.Time  `json:"started"`
	Load     [2]float64 `json:"loadAverage"`
	Rows     []stateRow `json:"rows"`
	Error    string     `json:"error,omitempty"`
}

// stateRow is one measurement: Tasks goroutines, each doing Op on its own
// task, one call after the other, for the row's duration.
type stateRow struct {
	Op        string `json:"op"`
	Via       string `json:"via"`
	Transport string `json:"transport,omitempty"` // tcp or unix; none for pebble
	Encoding  string `json:"encoding,omitempty"`  // json or binary; none for a single read and the floor
	Tasks     int    `json:"tasks"`
	// Ops counts calls (reads, batches, commits, read-modify-write
	// rounds); Items what they carried (keys, records, events).
	Ops         int        `json:"ops"`
	Items       int        `json:"items"`
	Seconds     float64    `json:"seconds"`
	OpsPerSec   float64    `json:"opsPerSec"`
	ItemsPerSec float64    `json:"itemsPerSec"`
	Latency     PauseStats `json:"latency"` // per call, ms
	Errors      int        `json:"errors"`
	FirstError  string     `json:"firstError,omitempty"`
	// CPUPerOpUS is the CPU time each process spent per call, in µs.
	CPUPerOpUS map[string]float64 `json:"cpuPerOpUs,omitempty"`
}

// stateTarget is what a row's calls go to.
type stateTarget interface {
	read(ctx context.Context, task string, key []byte) error
	readMany(ctx context.Context, task string, keys [][]byte) ([][]byte, error)
	commit(ctx context.Context, task string, puts []api.KV, checkpoint []byte) error
}

// apiTarget is the agent's API, through the Go client.
type apiTarget struct {
	cl     *client.Client
	epochs map[string]uint64
}

func (a apiTarget) read(ctx context.Context, task string, key []byte) error {
	_, err := a.cl.Get(ctx, task, key)
	if errors.Is(err, client.ErrNotFound) {
		return nil
	}
	return err
}

func (a apiTarget) readMany(ctx context.Context, task string, keys [][]byte) ([][]byte, error) {
	return a.cl.GetMany(ctx, task, keys)
}

func (a apiTarget) commit(ctx context.Context, task string, puts []api.KV, checkpoint []byte) error {
	_, err := a.cl.Commit(ctx, task, api.CommitRequest{Puts: puts, Checkpoint: checkpoint, Epoch: a.epochs[task]})
	return err
}

// floorTarget is the floor: each call is one bare round trip carrying the
// bytes of the API's binary form of the same call.
type floorTarget struct {
	hc   *http.Client
	base string
}

func (f floorTarget) roundTrip(ctx context.Context, method, path string, body []byte, answer int) error {
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, f.base+path+"?n="+strconv.Itoa(answer), rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header["Content-Type"] = []string{api.MediaBinary}
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("floor answered %d", resp.StatusCode)
	}
	return nil
}

func (f floorTarget) read(ctx context.Context, _ string, _ []byte) error {
	return f.roundTrip(ctx, http.MethodGet, "/read", nil, stateValueSize)
}

func (f floorTarget) readMany(ctx context.Context, _ string, keys [][]byte) ([][]byte, error) {
	return nil, f.roundTrip(ctx, http.MethodPost, "/get", api.AppendGetBinary(nil, keys), 4+len(keys)*(4+stateValueSize))
}

func (f floorTarget) commit(ctx context.Context, _ string, puts []api.KV, checkpoint []byte) error {
	return f.roundTrip(ctx, http.MethodPost, "/commit", api.AppendCommitBinary(nil, api.CommitRequest{Puts: puts, Checkpoint: checkpoint, Epoch: 1}),
		len(`{"task":"orders-0","seq":12345678,"epoch":1}`+"\n"))
}

// pebbleTarget is a Pebble store in this process, through statestore:
// what the agent itself does for a read, and for a commit without the
// changelog.
type pebbleTarget struct {
	store *statestore.Store
	seqs  map[string]*atomic.Uint64
}

func (p pebbleTarget) read(_ context.Context, task string, key []byte) error {
	_, err := p.store.Get(task, key)
	if errors.Is(err, statestore.ErrNotFound) {
		return nil
	}
	return err
}

func (p pebbleTarget) readMany(_ context.Context, task string, keys [][]byte) ([][]byte, error) {
	return p.store.GetMany(task, keys, 0)
}

func (p pebbleTarget) commit(_ context.Context, task string, puts []api.KV, checkpoint []byte) error {
	kvs := make([]statestore.KV, len(puts))
	for i, kv := range puts {
		kvs[i] = statestore.KV{Key: kv.Key, Value: kv.Value}
	}
	return p.store.Apply(task, statestore.Commit{Seq: p.seqs[task].Add(1), Epoch: 1, Checkpoint: checkpoint, Puts: kvs})
}

// stateKey is the key of record i, as lab.Preload writes it.
func stateKey(i int) []byte { return fmt.Appendf(nil, "%s%08d", lab.HistoryKeyPrefix, i) }

// stateTask names task i of the scenario.
func stateTask(i int) string { return "orders-" + strconv.Itoa(i) }

// runState runs the state scenario and reports it.
func runState(ctx context.Context, s Settings, procs *lab.Processes, e Env) error {
	res := stateResults{Settings: s, Started: time.Now().UTC()}
	res.Load[0] = loadAverage()
	err := measureState(ctx, s, procs, &res, e.Stderr)
	res.Load[1] = loadAverage()
	if err != nil {
		res.Error = err.Error()
	}
	return report(s, e, res, func(w io.Writer) error { return writeStateTable(w, res) }, err)
}

// measureState measures Pebble in this process, then, per transport, the
// floor and the API next to each other.
func measureState(ctx context.Context, s Settings, procs *lab.Processes, res *stateResults, progress io.Writer) error {
	st := s.State
	most := slices.Max(st.Tasks)
	fmt.Fprintf(progress, "state: Pebble in this process, %d task(s) of %d keys\n", most, st.Keys)
	rows, err := measurePebble(ctx, st, most)
	res.Rows = append(res.Rows, rows...)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "handoff-floor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var floorTCP, floorUnix string
	floorPid := os.Getpid()
	if procs != nil {
		fp, err := startFloorProcess(ctx, procs, dir)
		if err != nil {
			return err
		}
		defer fp.close()
		floorTCP, floorUnix, floorPid = fp.tcp, fp.unix, fp.p.Pid()
	} else {
		f, err := startFloor(dir)
		if err != nil {
			return err
		}
		defer f.close()
		floorTCP, floorUnix = f.tcp, f.unix
	}
	for _, transport := range st.Transports {
		floor := "http://" + floorTCP
		if transport == "unix" {
			floor = floorUnix
		}
		fmt.Fprintf(progress, "state: the API on %s, %d task(s) of %d keys\n", transport, most, st.Keys)
		rows, err := measureAPI(ctx, s, procs, transport, floor, floorPid)
		res.Rows = append(res.Rows, rows...)
		if err != nil {
			return err
		}
	}
	return nil
}

// measurePebble loads a store in a temporary directory as the agent's
// holds its tasks, and measures it.
func measurePebble(ctx context.Context, st StateSettings, tasks int) (_ []stateRow, err error) {
	dir, err := os.MkdirTemp("", "handoff-bench-pebble-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	store, err := statestore.Open(dir, statestore.Options{MinFree: -1})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := store.Close(); err == nil {
			err = cerr
		}
	}()
	tgt := pebbleTarget{store: store, seqs: map[string]*atomic.Uint64{}}
	rng := rand.New(rand.NewPCG(1, 2))
	value := make([]byte, stateValueSize)
	fill := func(b []byte) {
		for i := 0; i < len(b); i += 8 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], rng.Uint64())
			copy(b[i:], w[:])
		}
	}
	for t := range tasks {
		task := stateTask(t)
		tgt.seqs[task] = &atomic.Uint64{}
		for i := 0; i < st.Keys; i += 1000 {
			var c statestore.Commit
			for j := i; j < min(i+1000, st.Keys); j++ {
				fill(value)
				c.Puts = append(c.Puts, statestore.KV{Key: stateKey(j), Value: slices.Clone(value)})
			}
			c.Seq, c.Epoch = tgt.seqs[task].Add(1), 1
			if err := store.Apply(task, c); err != nil {
				return nil, err
			}
		}
	}
	pids := map[string]int{"bench": os.Getpid()}
	var rows []stateRow
	for _, n := range st.Tasks {
		for _, op := range st.Ops {
			if ctx.Err() != nil {
				return rows, ctx.Err()
			}
			rows = append(rows, runRow(ctx, stateRow{Op: op, Via: viaPebble, Tasks: n}, tgt, st, pids))
		}
	}
	return rows, nil
}

// measureAPI runs one member whose API listens on transport, with the
// state loaded, and measures each operation through it next to the floor.
func measureAPI(ctx context.Context, s Settings, procs *lab.Processes, transport, floorURL string, floorPid int) (_ []stateRow, err error) {
	st := s.State
	most := slices.Max(st.Tasks)
	cfg := assign.DefaultConfig()
	cfg.Stateful = []string{fmt.Sprintf("orders-0..%d", most-1)}
	l, err := lab.Open(ctx, lab.Options{Group: "bench-state-" + transport, NATSURL: s.NATS, Config: cfg, Keep: s.Keep,
		SampleEvery: s.Sample, Seed: s.Seed, AgentLevel: agentLevel(s), Processes: procs, Socket: transport == "unix"})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := l.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if _, err := l.Preload(ctx, lab.History{Keys: st.Keys, ValueSize: stateValueSize}); err != nil {
		return nil, err
	}
	ms, err := l.AddMembers(ctx, MemberID(1))
	if err != nil {
		return nil, err
	}
	if _, err := l.WaitSteady(ctx, s.Hold, OwnedBy([]string{MemberID(1)})); err != nil {
		return nil, fmt.Errorf("tasks active: %w", err)
	}
	url := ms[0].URL()
	view, err := client.New(url).Assignment(ctx, 0, 0)
	if err != nil {
		return nil, err
	}
	epochs := map[string]uint64{}
	for _, t := range view.Tasks {
		epochs[t.ID] = t.Epoch
	}
	targets := map[string]apiTarget{
		"json":   {cl: client.New(url, client.WithJSON()), epochs: epochs},
		"binary": {cl: client.New(url), epochs: epochs},
	}
	floor := floorTarget{hc: &http.Client{Transport: client.NewTransport(floorURL)}, base: "http://" + strings.TrimPrefix(floorURL, "http://")}
	if _, socket := api.SocketPath(floorURL); socket {
		floor.base = "http://localhost"
	}
	pids := map[string]int{"bench": os.Getpid()}
	if p := ms[0].AgentPid(); p > 0 {
		pids["agent"] = p
	}
	if p := l.NATSPid(); p > 0 {
		pids["nats-server"] = p
	}
	floorPids := map[string]int{"bench": os.Getpid(), "floor": floorPid}
	var rows []stateRow
	for _, n := range st.Tasks {
		for _, op := range st.Ops {
			if ctx.Err() != nil {
				return rows, ctx.Err()
			}
			rows = append(rows, runRow(ctx, stateRow{Op: op, Via: viaFloor, Transport: transport, Tasks: n}, floor, st, floorPids))
			encodings := st.Encodings
			if op == opRead {
				encodings = encodings[:1] // a single read has no body: its encoding does not matter
			}
			for _, enc := range encodings {
				row := stateRow{Op: op, Via: viaAPI, Transport: transport, Encoding: enc, Tasks: n}
				if op == opRead {
					row.Encoding = ""
				}
				rows = append(rows, runRow(ctx, row, targets[enc], st, pids))
			}
		}
	}
	return rows, nil
}

// runRow runs row.Tasks goroutines doing row.Op on their own tasks for
// the row's duration, after a short warm-up, and fills in the figures.
func runRow(ctx context.Context, row stateRow, tgt stateTarget, st StateSettings, pids map[string]int) stateRow {
	const warmup = 100 * time.Millisecond
	var (
		mu   sync.Mutex
		lats []time.Duration
		wg   sync.WaitGroup
	)
	start := time.Now().Add(warmup)
	end := start.Add(st.Duration)
	var before map[string]time.Duration
	var beforeOnce sync.Once
	for w := range row.Tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			task := stateTask(w)
			rng := rand.New(rand.NewPCG(uint64(w)+1, uint64(len(row.Op))))
			local := make([]time.Duration, 0, 1<<14)
			items, errs, first := 0, 0, ""
			for i := 0; ctx.Err() == nil; i++ {
				now := time.Now()
				if now.After(end) && len(local)+errs > 0 {
					break // a goroutine that started late makes one call at least
				}
				if !now.Before(start) {
					beforeOnce.Do(func() { before = cpuTimes(pids) })
				}
				n, err := stateCall(ctx, row.Op, tgt, task, st, rng, i)
				took := time.Since(now)
				if now.Before(start) {
					continue // warming up
				}
				if err != nil {
					errs++
					if first == "" {
						first = err.Error()
					}
					select {
					case <-ctx.Done():
					case <-time.After(5 * time.Millisecond):
					}
					continue
				}
				local = append(local, took)
				items += n
			}
			mu.Lock()
			lats = append(lats, local...)
			row.Items += items
			row.Errors += errs
			if row.FirstError == "" {
				row.FirstError = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	after := cpuTimes(pids)
	row.Seconds = time.Since(start).Seconds()
	row.Ops = len(lats)
	row.OpsPerSec = float64(row.Ops) / row.Seconds
	row.ItemsPerSec = float64(row.Items) / row.Seconds
	row.Latency = PauseStatsOf(lats)
	if row.Ops > 0 && before != nil {
		row.CPUPerOpUS = map[string]float64{}
		for name, t := range after {
			if b, ok := before[name]; ok {
				row.CPUPerOpUS[name] = float64(t-b) / float64(time.Microsecond) / float64(row.Ops)
			}
		}
	}
	return row
}

// stateCall makes call i of op on task and returns how many items it
// carried.
func stateCall(ctx context.Context, op string, tgt stateTarget, task string, st StateSettings, rng *rand.Rand, i int) (int, error) {
	checkpoint := binary.BigEndian.AppendUint64(nil, uint64(i))
	switch op {
	case opRead:
		return 1, tgt.read(ctx, task, stateKey(rng.IntN(st.Keys)))
	case opBatch:
		keys := make([][]byte, st.Batch)
		for j := range keys {
			keys[j] = stateKey(rng.IntN(st.Keys))
		}
		_, err := tgt.readMany(ctx, task, keys)
		return len(keys), err
	case opCommit:
		puts := make([]api.KV, st.Batch)
		for j := range puts {
			puts[j] = api.KV{Key: fmt.Appendf(nil, "key-%014d", j), Value: make([]byte, stateValueSize)}
		}
		return len(puts), tgt.commit(ctx, task, puts, checkpoint)
	case opRMW:
		return st.Batch, readModifyWrite(ctx, tgt, task, st, rng, checkpoint)
	}
	return 0, fmt.Errorf("unknown operation %q", op)
}

// readModifyWrite is one batch of the read-modify-write worker: Batch
// events on random keys; one batch read of the distinct keys; each value's
// first 8 bytes count the key's events; one commit of the new values.
func readModifyWrite(ctx context.Context, tgt stateTarget, task string, st StateSettings, rng *rand.Rand, checkpoint []byte) error {
	adds := make(map[int]uint64, st.Batch)
	for range st.Batch {
		adds[rng.IntN(st.Keys)]++
	}
	idx := make([]int, 0, len(adds))
	for k := range adds {
		idx = append(idx, k)
	}
	slices.Sort(idx)
	keys := make([][]byte, len(idx))
	for j, k := range idx {
		keys[j] = stateKey(k)
	}
	vals, err := tgt.readMany(ctx, task, keys)
	if err != nil {
		return err
	}
	puts := make([]api.KV, len(keys))
	for j, k := range keys {
		v := make([]byte, stateValueSize)
		if j < len(vals) {
			copy(v, vals[j])
		}
		binary.BigEndian.PutUint64(v, binary.BigEndian.Uint64(v)+adds[idx[j]])
		puts[j] = api.KV{Key: k, Value: v}
	}
	return tgt.commit(ctx, task, puts, checkpoint)
}

// writeStateTable writes the state scenario's results for people.
func writeStateTable(w io.Writer, r stateResults) error {
	s, st := r.Settings, r.Settings.State
	layout := "in one process (agent, client, floor and NATS share it)"
	if s.Processes {
		layout = "across processes (this process calls a handoff agent process on a nats-server process; the floor is a process too)"
	}
	fmt.Fprintf(w, "handoff-lab bench · state through the API · %d keys of %d B per task, batches of %d · %s\n",
		st.Keys, stateValueSize, st.Batch, layout)
	fmt.Fprintf(w, "started %s · %s per row · %d CPU(s) · load average before / after %.1f / %.1f\n",
		r.Started.Format(time.RFC3339), st.Duration, runtime.NumCPU(), r.Load[0], r.Load[1])
	fmt.Fprintln(w, "floor: a bare net/http round trip on the same transport moving the same bytes (the binary form's); pebble: statestore in this process")
	groups := map[string][]stateRow{}
	var order []string
	for _, row := range r.Rows {
		g := fmt.Sprintf("%s · %d task(s)", orDash(row.Transport, "Pebble in this process"), row.Tasks)
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], row)
	}
	for _, g := range order {
		fmt.Fprintf(w, "\n%s\n", g)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "operation\tvia\tcalls/s\titems/s\tp50 / p99 ms\tp50 vs floor\terrors\tCPU per call\t")
		for _, row := range groups[g] {
			vs := "-"
			if f, ok := floorOf(r.Rows, row); ok && row.Via == viaAPI && f.Latency.P50 > 0 {
				vs = fmt.Sprintf("%.2f×", row.Latency.P50/f.Latency.P50)
			}
			via := row.Via
			if row.Encoding != "" {
				via += " " + row.Encoding
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3f / %.3f\t%s\t%d\t%s\t\n", row.Op, via, Count(row.OpsPerSec), Count(row.ItemsPerSec),
				row.Latency.P50, row.Latency.P99, vs, row.Errors, stateCPUCell(row.CPUPerOpUS))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, row := range r.Rows {
		if row.FirstError != "" {
			fmt.Fprintf(w, "\nfirst error of %s via %s %s (%d tasks): %s\n", row.Op, row.Via, row.Encoding, row.Tasks, row.FirstError)
		}
	}
	if r.Error != "" {
		fmt.Fprintf(w, "\nfailed: %s\n", r.Error)
	}
	fmt.Fprintln(w, "\nHeadline figures against their targets")
	for _, row := range r.Rows {
		if row.Via != viaAPI {
			continue
		}
		switch {
		case row.Op == opRMW && (row.Tasks == 1 || row.Tasks == 8):
			target := map[int]float64{1: 100_000, 8: 200_000}[row.Tasks]
			fmt.Fprintf(w, "  read-modify-write, %s %s, %d task(s): %s events/s  %s target ≥ %s\n", row.Transport, row.Encoding, row.Tasks,
				Count(row.ItemsPerSec), verdict(row.ItemsPerSec >= target), Count(target))
		case row.Op == opCommit && row.Tasks == 8:
			fmt.Fprintf(w, "  commit of %d records, %s %s, 8 tasks: %s records/s at p99 %.2f ms  %s target ≥ 200k records/s at p99 ≤ 2 ms\n",
				st.Batch, row.Transport, row.Encoding, Count(row.ItemsPerSec), row.Latency.P99, verdict(row.ItemsPerSec >= 200_000 && row.Latency.P99 <= 2))
		case row.Op == opRead && row.Tasks == 1:
			if f, ok := floorOf(r.Rows, row); ok && f.Latency.P50 > 0 {
				ratio := row.Latency.P50 / f.Latency.P50
				fmt.Fprintf(w, "  single read, %s, 1 task: p50 %.3f ms, %.2f× the floor's %.3f ms  %s target ≤ 1.5×\n", row.Transport,
					row.Latency.P50, ratio, f.Latency.P50, verdict(ratio <= 1.5))
			}
		}
	}
	return nil
}

// floorOf finds the floor row of an API row: same operation, transport
// and tasks.
func floorOf(rows []stateRow, row stateRow) (stateRow, bool) {
	for _, f := range rows {
		if f.Via == viaFloor && f.Op == row.Op && f.Transport == row.Transport && f.Tasks == row.Tasks {
			return f, true
		}
	}
	return stateRow{}, false
}

func verdict(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

func orDash(s, dash string) string {
	if s == "" {
		return dash
	}
	return s
}

// stateCPUCell prints CPU per call by process, in a fixed order.
func stateCPUCell(us map[string]float64) string {
	var parts []string
	for _, name := range []string{"agent", "nats-server", "floor", "bench"} {
		if v, ok := us[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.0f", name, v))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ") + " µs"
}

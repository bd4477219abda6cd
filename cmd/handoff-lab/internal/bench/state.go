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
	Keys       int      `json:"keys"`
	Tasks      []int    `json:"tasks"`
	Batch      int      `json:"batch"`
	Transports []string `json:"transports"`
	Encodings  []string `json:"encodings"`
	Ops        []string `json:"ops"`
	// Dists are the key distributions of the operations that pick keys
	// (read, batch, rmw): uniform, zipf.
	Dists     []string      `json:"dists"`
	Repeat    int           `json:"repeat"`
	Duration  time.Duration `json:"-"`
	DurationS string        `json:"duration"`

	tasks, transports, encodings, ops, dists string
}

// Key distributions of the state scenario.
const (
	distUniform = "uniform"
	distZipf    = "zipf"
)

// stateZipfS is the exponent of the zipf distribution: the closest to
// YCSB's 0.99 that math/rand's Zipf takes (it needs more than 1). Over
// 100,000 keys, the 1,000 hottest take about two thirds of the calls.
const stateZipfS = 1.01

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
	fs.StringVar(&st.dists, "state-dists", "uniform,zipf", "state scenario: the key distributions of the operations that pick keys (read, batch, rmw): uniform, zipf (exponent 1.01, the hottest keys spread over the keyspace)")
	fs.IntVar(&st.Repeat, "state-repeat", 3, "state scenario: how many times each row runs; the rows run in turns (A, B, ..., A, B, ...) and each figure is the median of its runs, with their spread")
	fs.DurationVar(&st.Duration, "state-duration", 2*time.Second, "state scenario: how long each row runs, each time")
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
	if st.Dists, err = names("--state-dists", st.dists, distUniform, distZipf); err != nil {
		return err
	}
	switch {
	case st.Repeat < 1:
		return fmt.Errorf("--state-repeat %d: use 1 or more", st.Repeat)
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

// stateRow is one row: Tasks goroutines, each doing Op on its own task,
// one call after the other, for the row's duration, Runs times, in turns
// with the other rows.
type stateRow struct {
	Op        string `json:"op"`
	Via       string `json:"via"`
	Transport string `json:"transport,omitempty"` // tcp or unix; none for pebble
	Encoding  string `json:"encoding,omitempty"`  // json or binary; none for a single read and the floor
	// Dist is how the row's calls pick keys (uniform or zipf); none for a
	// commit, which writes the same keys every time.
	Dist  string `json:"dist,omitempty"`
	Tasks int    `json:"tasks"`
	Runs  int    `json:"runs"`
	// Ops counts calls (reads, batches, commits, read-modify-write
	// rounds); Items what they carried (keys, records, events); Seconds
	// how long they took, over every run.
	Ops     int     `json:"ops"`
	Items   int     `json:"items"`
	Seconds float64 `json:"seconds"`
	// OpsPerSec and ItemsPerSec are the median run's; Latency is over the
	// calls of every run; Spread gives the runs' least, median and most.
	OpsPerSec   float64     `json:"opsPerSec"`
	ItemsPerSec float64     `json:"itemsPerSec"`
	Latency     PauseStats  `json:"latency"` // per call, ms
	Spread      stateSpread `json:"spread"`
	Errors      int         `json:"errors"`
	FirstError  string      `json:"firstError,omitempty"`
	// CPUPerOpUS is the CPU time each process spent per call, in µs.
	CPUPerOpUS map[string]float64 `json:"cpuPerOpUs,omitempty"`
}

// stateSpread is how a row's figures varied over its runs.
type stateSpread struct {
	ItemsPerSec spread `json:"itemsPerSec"`
	P50         spread `json:"p50Ms"`
	P99         spread `json:"p99Ms"`
}

// spread is the least, the median and the most of a figure over runs.
type spread struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

// spreadOf returns the spread of vs (not empty).
func spreadOf(vs []float64) spread {
	s := slices.Clone(vs)
	slices.Sort(s)
	return spread{Min: s[0], Median: s[(len(s)-1)/2], Max: s[len(s)-1]}
}

// stateRun is what one run of a row measured.
type stateRun struct {
	lats       []time.Duration
	items      int
	errs       int
	firstError string
	seconds    float64
	cpu        map[string]time.Duration // CPU time each process spent
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

// stateSpec is one row to measure, what its calls go to, and what its
// runs measured so far.
type stateSpec struct {
	row  stateRow
	tgt  stateTarget
	pids map[string]int
	runs []stateRun
}

// apiTargets are a member's API in each encoding, and the processes that
// serve it.
type apiTargets struct {
	enc  map[string]apiTarget
	pids map[string]int
}

// measureState opens everything the rows call first, Pebble in this
// process, the floor, and a member per transport, then runs the rows in
// turns, --state-repeat times: every row once, then every row again, so
// that a change of the machine's speed meets every row alike and rows
// side by side (the API and its floor, Pebble) compare within minutes.
func measureState(ctx context.Context, s Settings, procs *lab.Processes, res *stateResults, progress io.Writer) (retErr error) {
	st := s.State
	most := slices.Max(st.Tasks)
	fmt.Fprintf(progress, "state: Pebble in this process, %d task(s) of %d keys\n", most, st.Keys)
	pebble, closePebble, err := openPebble(st, most)
	if err != nil {
		return err
	}
	defer closePebble()
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
	floors := map[string]floorTarget{}
	apis := map[string]apiTargets{}
	for _, transport := range st.Transports {
		floorURL := "http://" + floorTCP
		if transport == "unix" {
			floorURL = floorUnix
		}
		floor := floorTarget{hc: &http.Client{Transport: client.NewTransport(floorURL)}, base: floorURL}
		if _, socket := api.SocketPath(floorURL); socket {
			floor.base = "http://localhost"
		}
		floors[transport] = floor
		fmt.Fprintf(progress, "state: a member with its API on %s, %d task(s) of %d keys\n", transport, most, st.Keys)
		at, closeAPI, err := openAPI(ctx, s, procs, transport)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := closeAPI(); cerr != nil && retErr == nil {
				retErr = cerr
			}
		}()
		apis[transport] = at
	}
	floorPids := map[string]int{"bench": os.Getpid(), "floor": floorPid}
	specs := stateSpecs(st, pebble, floors, floorPids, apis)
	for r := range st.Repeat {
		fmt.Fprintf(progress, "state: round %d of %d: %d rows of %s\n", r+1, st.Repeat, len(specs), st.Duration)
		for _, sp := range specs {
			if ctx.Err() != nil {
				break
			}
			sp.runs = append(sp.runs, runOnce(ctx, sp.row, sp.tgt, st, sp.pids))
		}
	}
	for _, sp := range specs {
		if len(sp.runs) > 0 {
			res.Rows = append(res.Rows, sp.summary())
		}
	}
	return ctx.Err()
}

// stateSpecs lists the rows in the order each round runs them: by task
// count, operation and key distribution, and within those Pebble, then per
// transport the floor and the API in each encoding, side by side.
func stateSpecs(st StateSettings, pebble pebbleTarget, floors map[string]floorTarget, floorPids map[string]int, apis map[string]apiTargets) []*stateSpec {
	var specs []*stateSpec
	for _, n := range st.Tasks {
		for _, op := range st.Ops {
			dists := st.Dists
			if op == opCommit {
				dists = []string{""} // the same keys every time
			}
			for _, dist := range dists {
				specs = append(specs, &stateSpec{row: stateRow{Op: op, Via: viaPebble, Dist: dist, Tasks: n}, tgt: pebble,
					pids: map[string]int{"bench": os.Getpid()}})
				for _, transport := range st.Transports {
					specs = append(specs, &stateSpec{row: stateRow{Op: op, Via: viaFloor, Transport: transport, Dist: dist, Tasks: n},
						tgt: floors[transport], pids: floorPids})
					encodings := st.Encodings
					if op == opRead {
						encodings = encodings[:1] // a single read has no body: its encoding does not matter
					}
					for _, enc := range encodings {
						row := stateRow{Op: op, Via: viaAPI, Transport: transport, Encoding: enc, Dist: dist, Tasks: n}
						if op == opRead {
							row.Encoding = ""
						}
						specs = append(specs, &stateSpec{row: row, tgt: apis[transport].enc[enc], pids: apis[transport].pids})
					}
				}
			}
		}
	}
	return specs
}

// summary is the spec's row with the figures of its runs.
func (sp *stateSpec) summary() stateRow {
	row := sp.row
	row.Runs = len(sp.runs)
	var lats []time.Duration
	var rates, p50s, p99s []float64
	cpu := map[string]time.Duration{}
	for _, r := range sp.runs {
		lats = append(lats, r.lats...)
		row.Items += r.items
		row.Errors += r.errs
		row.Seconds += r.seconds
		if row.FirstError == "" {
			row.FirstError = r.firstError
		}
		rates = append(rates, float64(r.items)/r.seconds)
		st := PauseStatsOf(r.lats)
		p50s, p99s = append(p50s, st.P50), append(p99s, st.P99)
		for name, d := range r.cpu {
			cpu[name] += d
		}
	}
	row.Ops = len(lats)
	row.Latency = PauseStatsOf(lats)
	row.Spread = stateSpread{ItemsPerSec: spreadOf(rates), P50: spreadOf(p50s), P99: spreadOf(p99s)}
	row.ItemsPerSec = row.Spread.ItemsPerSec.Median
	if row.Items > 0 {
		row.OpsPerSec = row.ItemsPerSec * float64(row.Ops) / float64(row.Items)
	}
	if row.Ops > 0 && len(cpu) > 0 {
		row.CPUPerOpUS = map[string]float64{}
		for name, d := range cpu {
			row.CPUPerOpUS[name] = float64(d) / float64(time.Microsecond) / float64(row.Ops)
		}
	}
	return row
}

// openPebble loads a store in a temporary directory as the agent's holds
// its tasks; the func removes it.
func openPebble(st StateSettings, tasks int) (pebbleTarget, func(), error) {
	dir, err := os.MkdirTemp("", "handoff-bench-pebble-")
	if err != nil {
		return pebbleTarget{}, nil, err
	}
	store, err := statestore.Open(dir, statestore.Options{MinFree: -1})
	if err != nil {
		os.RemoveAll(dir)
		return pebbleTarget{}, nil, err
	}
	closeStore := func() {
		_ = store.Close()
		os.RemoveAll(dir)
	}
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
				closeStore()
				return pebbleTarget{}, nil, err
			}
		}
	}
	return tgt, closeStore, nil
}

// openAPI runs one member whose API listens on transport, with the state
// loaded and its tasks active; the func stops it.
func openAPI(ctx context.Context, s Settings, procs *lab.Processes, transport string) (_ apiTargets, closeAPI func() error, err error) {
	st := s.State
	most := slices.Max(st.Tasks)
	cfg := assign.DefaultConfig()
	cfg.Stateful = []string{fmt.Sprintf("orders-0..%d", most-1)}
	l, err := lab.Open(ctx, lab.Options{Group: "bench-state-" + transport, NATSURL: s.NATS, Config: cfg, Keep: s.Keep,
		SampleEvery: s.Sample, Seed: s.Seed, AgentLevel: agentLevel(s), Processes: procs, Socket: transport == "unix"})
	if err != nil {
		return apiTargets{}, nil, err
	}
	defer func() {
		if err != nil {
			_ = l.Close()
		}
	}()
	if _, err := l.Preload(ctx, lab.History{Keys: st.Keys, ValueSize: stateValueSize}); err != nil {
		return apiTargets{}, nil, err
	}
	ms, err := l.AddMembers(ctx, MemberID(1))
	if err != nil {
		return apiTargets{}, nil, err
	}
	if _, err := l.WaitSteady(ctx, s.Hold, OwnedBy([]string{MemberID(1)})); err != nil {
		return apiTargets{}, nil, fmt.Errorf("tasks active: %w", err)
	}
	url := ms[0].URL()
	view, err := client.New(url).Assignment(ctx, 0, 0)
	if err != nil {
		return apiTargets{}, nil, err
	}
	epochs := map[string]uint64{}
	for _, t := range view.Tasks {
		epochs[t.ID] = t.Epoch
	}
	at := apiTargets{
		enc: map[string]apiTarget{
			"json":   {cl: client.New(url, client.WithJSON()), epochs: epochs},
			"binary": {cl: client.New(url), epochs: epochs},
		},
		pids: map[string]int{"bench": os.Getpid()},
	}
	if p := ms[0].AgentPid(); p > 0 {
		at.pids["agent"] = p
	}
	if p := l.NATSPid(); p > 0 {
		at.pids["nats-server"] = p
	}
	return at, l.Close, nil
}

// runOnce runs row.Tasks goroutines doing row.Op on their own tasks for
// the row's duration, after a short warm-up, and returns what they
// measured.
func runOnce(ctx context.Context, row stateRow, tgt stateTarget, st StateSettings, pids map[string]int) stateRun {
	const warmup = 100 * time.Millisecond
	var (
		mu  sync.Mutex
		run stateRun
		wg  sync.WaitGroup
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
			pick := keyPicker(row.Dist, rng, st.Keys)
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
				n, err := stateCall(ctx, row.Op, tgt, task, st, pick, i)
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
			run.lats = append(run.lats, local...)
			run.items += items
			run.errs += errs
			if run.firstError == "" {
				run.firstError = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	after := cpuTimes(pids)
	run.seconds = time.Since(start).Seconds()
	if before != nil {
		run.cpu = map[string]time.Duration{}
		for name, t := range after {
			if b, ok := before[name]; ok {
				run.cpu[name] = t - b
			}
		}
	}
	return run
}

// keyPicker returns how a row's calls on one task pick a key's index:
// uniformly over the keys, or by a zipf distribution whose ranks are
// spread over the keyspace (rank r is key r·p mod keys for a large prime
// p), so that the hot keys are not neighbours in the store.
func keyPicker(dist string, rng *rand.Rand, keys int) func() int {
	if dist != distZipf || keys < 2 {
		return func() int { return rng.IntN(keys) }
	}
	z := rand.NewZipf(rng, stateZipfS, 1, uint64(keys-1))
	const p = 1_000_003
	return func() int { return int(z.Uint64() * p % uint64(keys)) }
}

// stateCall makes call i of op on task, with keys from pick, and returns
// how many items it carried.
func stateCall(ctx context.Context, op string, tgt stateTarget, task string, st StateSettings, pick func() int, i int) (int, error) {
	checkpoint := binary.BigEndian.AppendUint64(nil, uint64(i))
	switch op {
	case opRead:
		return 1, tgt.read(ctx, task, stateKey(pick()))
	case opBatch:
		keys := make([][]byte, st.Batch)
		for j := range keys {
			keys[j] = stateKey(pick())
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
		return st.Batch, readModifyWrite(ctx, tgt, task, st, pick, checkpoint)
	}
	return 0, fmt.Errorf("unknown operation %q", op)
}

// readModifyWrite is one batch of the read-modify-write worker: Batch
// events on keys from pick; one batch read of the distinct keys; each value's
// first 8 bytes count the key's events; one commit of the new values.
func readModifyWrite(ctx context.Context, tgt stateTarget, task string, st StateSettings, pick func() int, checkpoint []byte) error {
	adds := make(map[int]uint64, st.Batch)
	for range st.Batch {
		adds[pick()]++
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
	fmt.Fprintf(w, "started %s · %d runs of %s per row, the rows in turns · %d CPU(s) · load average before / after %.1f / %.1f\n",
		r.Started.Format(time.RFC3339), st.Repeat, st.Duration, runtime.NumCPU(), r.Load[0], r.Load[1])
	fmt.Fprintln(w, "floor: a bare net/http round trip on the same transport moving the same bytes (the binary form's); pebble: statestore in this process, no record cache")
	fmt.Fprintln(w, "keys: uniform, or zipf (exponent 1.01); each figure is the median run's, (least–most) over the runs")
	groups := map[int][]stateRow{}
	var order []int
	for _, row := range r.Rows {
		if _, ok := groups[row.Tasks]; !ok {
			order = append(order, row.Tasks)
		}
		groups[row.Tasks] = append(groups[row.Tasks], row)
	}
	for _, n := range order {
		fmt.Fprintf(w, "\n%d task(s)\n", n)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "operation\tkeys\tvia\titems/s\tp50 ms\tp99 ms\tp50 vs floor\titems/s vs pebble\terrors\tCPU per call\t")
		for _, row := range groups[n] {
			vsFloor, vsPebble := "-", "-"
			if f, ok := floorOf(r.Rows, row); ok && row.Via == viaAPI && f.Latency.P50 > 0 {
				vsFloor = fmt.Sprintf("%.2f×", row.Spread.P50.Median/f.Spread.P50.Median)
			}
			if p, ok := pebbleOf(r.Rows, row); ok && row.Via == viaAPI && p.ItemsPerSec > 0 {
				vsPebble = fmt.Sprintf("%.2f×", row.ItemsPerSec/p.ItemsPerSec)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t\n", row.Op, orDash(row.Dist, "-"), stateVia(row),
				countSpread(row.Spread.ItemsPerSec), msSpread(row.Spread.P50), msSpread(row.Spread.P99), vsFloor, vsPebble,
				row.Errors, stateCPUCell(row.CPUPerOpUS))
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
	fmt.Fprintln(w, "\nHeadline figures against their targets (medians of the runs)")
	for _, row := range r.Rows {
		if row.Via != viaAPI {
			continue
		}
		switch {
		case row.Op == opRMW && row.Encoding == "binary" && row.Tasks == 1:
			target := map[string]float64{distUniform: 150_000, distZipf: 250_000}[row.Dist]
			line := fmt.Sprintf("  read-modify-write, %s binary, 1 task(s), %s keys: %s events/s  %s target ≥ %s", row.Transport, row.Dist,
				Count(row.ItemsPerSec), verdict(row.ItemsPerSec >= target), Count(target))
			if p, ok := pebbleOf(r.Rows, row); ok && p.ItemsPerSec > 0 {
				ratio := row.ItemsPerSec / p.ItemsPerSec
				line += fmt.Sprintf("; %.2f× Pebble in process (%s)  %s target ≥ 1.5×", ratio, Count(p.ItemsPerSec), verdict(ratio >= 1.5))
			}
			fmt.Fprintln(w, line)
		case row.Op == opRMW && row.Encoding == "binary" && row.Tasks == 8:
			fmt.Fprintf(w, "  read-modify-write, %s binary, 8 task(s), %s keys: %s events/s  %s target ≥ 200k\n", row.Transport, row.Dist,
				Count(row.ItemsPerSec), verdict(row.ItemsPerSec >= 200_000))
		case row.Op == opCommit && row.Tasks == 8:
			fmt.Fprintf(w, "  commit of %d records, %s %s, 8 tasks: %s records/s at p99 %.2f ms  %s target ≥ 200k records/s at p99 ≤ 5 ms\n",
				st.Batch, row.Transport, row.Encoding, Count(row.ItemsPerSec), row.Spread.P99.Median,
				verdict(row.ItemsPerSec >= 200_000 && row.Spread.P99.Median <= 5))
		case row.Op == opRead && row.Tasks == 1:
			if f, ok := floorOf(r.Rows, row); ok && f.Spread.P50.Median > 0 {
				ratio := row.Spread.P50.Median / f.Spread.P50.Median
				fmt.Fprintf(w, "  single read, %s, 1 task, %s keys: p50 %.3f ms, %.2f× the floor's %.3f ms  %s target ≤ 1.5×\n", row.Transport,
					row.Dist, row.Spread.P50.Median, ratio, f.Spread.P50.Median, verdict(ratio <= 1.5))
			}
		}
	}
	return nil
}

// stateVia names what a row's calls go to.
func stateVia(row stateRow) string {
	switch row.Via {
	case viaPebble:
		return "pebble"
	case viaFloor:
		return row.Transport + " floor"
	}
	return strings.TrimSpace(row.Transport + " api " + row.Encoding)
}

// countSpread prints a rate's median and its range.
func countSpread(s spread) string {
	return fmt.Sprintf("%s (%s–%s)", Count(s.Median), Count(s.Min), Count(s.Max))
}

// msSpread prints a latency's median and its range, in ms.
func msSpread(s spread) string {
	return fmt.Sprintf("%.3f (%.3f–%.3f)", s.Median, s.Min, s.Max)
}

// floorOf finds the floor row of an API row: same operation, keys,
// transport and tasks.
func floorOf(rows []stateRow, row stateRow) (stateRow, bool) {
	for _, f := range rows {
		if f.Via == viaFloor && f.Op == row.Op && f.Dist == row.Dist && f.Transport == row.Transport && f.Tasks == row.Tasks {
			return f, true
		}
	}
	return stateRow{}, false
}

// pebbleOf finds the Pebble row of a row: same operation, keys and tasks.
func pebbleOf(rows []stateRow, row stateRow) (stateRow, bool) {
	for _, p := range rows {
		if p.Via == viaPebble && p.Op == row.Op && p.Dist == row.Dist && p.Tasks == row.Tasks {
			return p, true
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

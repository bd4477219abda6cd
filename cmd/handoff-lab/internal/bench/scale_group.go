package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/internal/cluster"
	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/proc"
	"github.com/handoffhq/handoff/internal/sidecar"
	"github.com/handoffhq/handoff/statestore"
)

// scaleGroup is one size's group: its NATS servers (or --nats), the
// members in this process, the lab's own watch of the generations, and
// the sink of the agents' logs.
type scaleGroup struct {
	s        Settings
	name     string
	url      string
	servers  []*proc.NATSServer
	replicas int
	cfg      assign.Config
	tasks    int
	slack    int // how far members' active counts may differ when balanced

	nc   *nats.Conn // the lab's own
	kv   jetstream.KeyValue
	gens *genWatch
	log  *scaleLog
	rec  *scaleRecorder

	// failovers are the failover pauses of every event so far (the
	// events' goroutine only).
	failovers []time.Duration
	// idleIn is what the median member's agent connection received per
	// second idle, bytes and messages: the events' figures per generation
	// discount it.
	idleIn [2]float64

	mu      sync.Mutex
	members map[string]*scaleMember
	next    int
}

// scaleMember is a member of the group: a real agent (cluster.Local, no
// API) and its light worker.
type scaleMember struct {
	id      string
	local   *cluster.Local
	worker  *scaleWorker
	stop    context.CancelFunc
	done    chan struct{}
	leaving bool
}

// openScaleGroup starts the NATS servers (unless --nats) under dir and
// the lab's connection; no member runs yet.
func openScaleGroup(ctx context.Context, s Settings, bin, dir string, members int) (*scaleGroup, error) {
	g := &scaleGroup{s: s, members: map[string]*scaleMember{}, log: &scaleLog{}, rec: newScaleRecorder(), tasks: s.Tasks, replicas: 1}
	g.name = fmt.Sprintf("scale%d", members)
	if s.NATS != "" {
		g.url = s.NATS
		g.name += "-" + strconv.FormatInt(time.Now().Unix(), 36)
	} else {
		servers, err := cluster.StartNATS(ctx, bin, dir, s.Scale.NATSNodes)
		if err != nil {
			return nil, err
		}
		g.servers = servers
		var urls []string
		for _, n := range servers {
			urls = append(urls, n.URL())
		}
		g.url = strings.Join(urls, ",")
		if len(servers) > 1 {
			g.replicas = 3
		}
	}
	cfg := assign.DefaultConfig()
	stateless := s.stateless()
	cfg.Stateful = []string{fmt.Sprintf("t-0..%d", s.Tasks-stateless-1)}
	if stateless > 0 {
		cfg.Stateless = []string{fmt.Sprintf("s-0..%d", stateless-1)}
		g.slack = 1
	}
	cfg.Handover = assign.Mode(s.Modes[0])
	cfg.Standbys = s.Standbys
	cfg.MaxLearnersPerMember = s.MaxLearners
	cfg.AcceptableLag = s.AcceptableLag
	cfg.SessionTimeout = assign.Duration(s.Session)
	if err := cfg.Validate(); err != nil {
		g.close()
		return nil, fmt.Errorf("group config: %w", err)
	}
	g.cfg = cfg
	g.slack++
	var err error
	if g.nc, err = nats.Connect(g.url, nats.Name("handoff-lab"), nats.MaxReconnects(-1)); err != nil {
		g.close()
		return nil, fmt.Errorf("connect the lab to NATS: %w", err)
	}
	js, err := jetstream.New(g.nc)
	if err != nil {
		g.close()
		return nil, err
	}
	if g.kv, err = group.OpenBucket(ctx, js, g.name, g.replicas); err != nil {
		g.close()
		return nil, err
	}
	g.gens = newGenWatch()
	go g.gens.run(g.kv)
	return g, nil
}

// close stops every member (as a crash: the group ends with the run), the
// watch, the lab's connection and the servers.
func (g *scaleGroup) close() {
	g.mu.Lock()
	ms := make([]*scaleMember, 0, len(g.members))
	for _, m := range g.members {
		ms = append(ms, m)
	}
	g.members = map[string]*scaleMember{}
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.stop()
			<-m.done
			_ = m.local.Crash(5 * time.Second)
		}()
	}
	wg.Wait()
	if g.gens != nil {
		g.gens.stop()
	}
	if g.nc != nil {
		g.nc.Close()
	}
	for _, n := range g.servers {
		_ = n.Proc.Kill()
	}
}

// holdLease takes the group's lease for the lab and renews it until the
// returned function gives it up: no member leads meanwhile.
func (g *scaleGroup) holdLease(ctx context.Context) (func() error, error) {
	js, err := jetstream.New(g.nc)
	if err != nil {
		return nil, err
	}
	l, err := group.Campaign(ctx, js, g.kv, g.name, group.LeaseRecord{Member: "handoff-lab", Since: time.Now()}, g.s.Session)
	if err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(ctx)
	renewed := make(chan error, 1)
	go func() {
		t := time.NewTicker(g.s.Session / 3)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				renewed <- nil
				return
			case <-t.C:
				if err := l.Renew(rctx); err != nil && rctx.Err() == nil {
					renewed <- err
					return
				}
			}
		}
	}()
	return func() error {
		stop()
		err := <-renewed
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return errors.Join(err, l.Release(rctx))
	}, nil
}

// newIDs names count new members.
func (g *scaleGroup) newIDs(count int) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	ids := make([]string, count)
	for i := range ids {
		g.next++
		ids[i] = fmt.Sprintf("m%04d", g.next)
	}
	return ids
}

// start opens and runs members ids at once.
func (g *scaleGroup) start(ctx context.Context, ids []string) error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.startOne(ctx, id)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (g *scaleGroup) startOne(ctx context.Context, id string) error {
	logger := zerolog.New(g.log).Hook(stampHook{}).Level(zerolog.InfoLevel)
	local, err := cluster.OpenLocal(ctx, cluster.LocalOptions{
		NATSURL: g.url,
		Sidecar: sidecar.Options{
			DataDir: "/" + id,
			// Small: the scale scenario's tasks hold a record or two.
			Store: statestore.Options{FS: vfs.NewMem(), CacheBytes: 1 << 20, MinFree: -1},
			Agent: agent.Options{
				Group:    g.name,
				MemberID: id,
				Config:   g.cfg,
				Replicas: g.replicas,
				Logger:   logger,
			},
			Logger: logger,
		},
	})
	if err != nil {
		return err
	}
	if err := local.Start(); err != nil {
		local.Abort()
		return err
	}
	wctx, stop := context.WithCancel(context.Background())
	m := &scaleMember{id: id, local: local, stop: stop, done: make(chan struct{})}
	m.worker = newScaleWorker(id, local.Member.Agent, g.rec, g.s.Scale.CommitPace)
	go func() {
		defer close(m.done)
		m.worker.run(wctx)
	}()
	g.mu.Lock()
	g.members[id] = m
	g.mu.Unlock()
	return nil
}

// live returns the members that run, sorted by ID.
func (g *scaleGroup) live() []*scaleMember {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*scaleMember, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// leader returns the member that leads, or nil.
func (g *scaleGroup) leader() *scaleMember {
	for _, m := range g.live() {
		if m.local.Member.Agent.Leading() {
			return m
		}
	}
	return nil
}

// followers returns up to count members that neither lead nor leave, the
// newest first.
func (g *scaleGroup) followers(count int) []*scaleMember {
	ms := g.live()
	var out []*scaleMember
	for i := len(ms) - 1; i >= 0 && len(out) < count; i-- {
		if m := ms[i]; !m.leaving && !m.local.Member.Agent.Leading() {
			out = append(out, m)
		}
	}
	return out
}

// remove forgets m (it stopped, or was killed).
func (g *scaleGroup) remove(m *scaleMember) {
	g.mu.Lock()
	delete(g.members, m.id)
	g.mu.Unlock()
}

// kill crashes m: its connection drops first, its record is left to
// expire. It returns the tasks m's worker held and when it was killed.
func (g *scaleGroup) kill(m *scaleMember) ([]string, time.Time) {
	tasks := m.worker.activeTasks()
	at := time.Now()
	g.rec.killed(m.id, tasks, at)
	g.remove(m)
	m.local.NC.Close()
	m.stop()
	<-m.done
	_ = m.local.Crash(5 * time.Second)
	return tasks, at
}

// leave starts a graceful leave of ms at once, and returns a function that
// waits (up to the bench's --timeout) until each has been told to shut
// down, then stops it.
func (g *scaleGroup) leave(ctx context.Context, ms []*scaleMember) func() error {
	for _, m := range ms {
		m.leaving = true
		_, _ = m.local.Member.Agent.Leave(ctx)
	}
	return func() error {
		ctx, cancel := context.WithTimeout(ctx, g.s.Timeout)
		defer cancel()
		var errs []error
		for _, m := range ms {
			err := poll.Until(ctx, 20*time.Millisecond, func() error {
				if _, _, _, done := m.worker.state(); !done {
					return errors.New("not told to shut down")
				}
				return nil
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("leave of %s: %w", m.id, err))
				continue
			}
			g.remove(m)
			m.stop()
			<-m.done
			if err := m.local.Stop(5 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}

// isBalanced reports whether every task is active on exactly one member's
// worker, none waits or is revoked, and the members that stay hold as
// many tasks as each other, within the slack.
func (g *scaleGroup) isBalanced() error {
	total, lo, hi, members := 0, -1, 0, 0
	for _, m := range g.live() {
		a, w, r, _ := m.worker.state()
		if m.leaving {
			if a > 0 {
				return fmt.Errorf("leaving %s still holds %d", m.id, a)
			}
			continue
		}
		if w > 0 || r > 0 {
			return fmt.Errorf("%s has %d tasks on their way and %d under revoke", m.id, w, r)
		}
		total += a
		members++
		if lo < 0 || a < lo {
			lo = a
		}
		hi = max(hi, a)
	}
	if total != g.tasks {
		return fmt.Errorf("%d of %d tasks active", total, g.tasks)
	}
	if hi-lo > g.slack {
		return fmt.Errorf("members hold %d to %d tasks", lo, hi)
	}
	if n := g.rec.unserved(); n > 0 {
		return fmt.Errorf("%d tasks of killed members not served yet", n)
	}
	return nil
}

// waitBalanced waits until the group is balanced (isBalanced) and has
// stayed so for the bench's --hold, and returns when it first was.
func (g *scaleGroup) waitBalanced(ctx context.Context) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, g.s.Timeout)
	defer cancel()
	var since time.Time
	err := poll.Until(ctx, 20*time.Millisecond, func() error {
		if err := g.isBalanced(); err != nil {
			since = time.Time{}
			return err
		}
		if since.IsZero() {
			since = time.Now()
		}
		if time.Since(since) < g.s.Hold {
			return errors.New("balanced, holding")
		}
		return nil
	})
	return since, err
}

// genWatch follows the generation record from the lab's connection.
type genWatch struct {
	mu    sync.Mutex
	seen  []genSeen
	done  chan struct{}
	ended chan struct{}
}

type genSeen struct {
	gen    uint64
	leader string
	at     time.Time
	bytes  int
}

func newGenWatch() *genWatch {
	return &genWatch{done: make(chan struct{}), ended: make(chan struct{})}
}

func (w *genWatch) run(kv jetstream.KeyValue) {
	defer close(w.ended)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-w.done
		cancel()
	}()
	group.Watch{KV: kv, Key: group.KeyGeneration, Log: zerolog.Nop(), Update: func(e jetstream.KeyValueEntry) error {
		if e.Operation() != jetstream.KeyValuePut {
			return nil
		}
		var rec group.GenerationRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return nil
		}
		w.mu.Lock()
		w.seen = append(w.seen, genSeen{gen: rec.Generation, leader: rec.Leader, at: time.Now(), bytes: len(e.Value())})
		w.mu.Unlock()
		return nil
	}}.Run(ctx)
}

func (w *genWatch) stop() {
	close(w.done)
	<-w.ended
}

// mark is a point in the watch to count from.
func (w *genWatch) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen)
}

// since returns the generations seen from mark on.
func (w *genWatch) since(mark int) []genSeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]genSeen(nil), w.seen[mark:]...)
}

// last is the last generation seen.
func (w *genWatch) last() (genSeen, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) == 0 {
		return genSeen{}, false
	}
	return w.seen[len(w.seen)-1], true
}

// stampHook stamps each agent's log line with the time to the microsecond,
// as the agent process does (zerolog's Timestamp has whole seconds).
type stampHook struct{}

func (stampHook) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
}

// scaleLog is the sink of every agent's log: it keeps the leader's
// "generation published" lines and counts warnings, and writes every line
// to all if set (--out's agents-<members>.log), else drops the rest.
type scaleLog struct {
	mu        sync.Mutex
	published []publishedLine
	warnings  int
	first     string
	all       *bufio.Writer
}

// publishedLine is a leader's "generation published" log line.
type publishedLine struct {
	Generation uint64  `json:"generation"`
	Writes     int     `json:"writes"`
	Plan       float64 `json:"plan"`    // ms
	Publish    float64 `json:"publish"` // ms
}

var (
	logPublished = []byte(`"message":"generation published"`)
	logWarn      = []byte(`"level":"warn"`)
	logError     = []byte(`"level":"error"`)
)

// Write takes one log line (zerolog writes each event in one call).
func (l *scaleLog) Write(p []byte) (int, error) {
	if l.all != nil {
		l.mu.Lock()
		_, _ = l.all.Write(p) // a diagnostic copy: its loss does not fail the run
		l.mu.Unlock()
	}
	switch {
	case bytes.Contains(p, logPublished):
		var pl publishedLine
		if json.Unmarshal(p, &pl) == nil {
			l.mu.Lock()
			l.published = append(l.published, pl)
			l.mu.Unlock()
		}
	case bytes.Contains(p, logWarn) || bytes.Contains(p, logError):
		l.mu.Lock()
		l.warnings++
		if l.first == "" {
			l.first = strings.TrimSpace(string(p))
		}
		l.mu.Unlock()
	}
	return len(p), nil
}

// mark is a point in the published lines to count from.
func (l *scaleLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.published)
}

func (l *scaleLog) since(mark int) []publishedLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]publishedLine(nil), l.published[mark:]...)
}

// connCounts are one member's connections' counters as the server keeps
// them (the server's in is the member's out).
type connCounts struct {
	msgsIn, msgsOut, bytesIn, bytesOut uint64
}

// serverStats reads every server's connections (connz), by member, and
// the servers' streams' consumer counts (jsz).
func (g *scaleGroup) connz(ctx context.Context) (map[string]connCounts, int, error) {
	out := map[string]connCounts{}
	conns := 0
	for _, n := range g.servers {
		offset := 0
		for {
			var cz struct {
				Total int `json:"total"`
				Conns []struct {
					Name     string `json:"name"`
					InMsgs   uint64 `json:"in_msgs"`
					OutMsgs  uint64 `json:"out_msgs"`
					InBytes  uint64 `json:"in_bytes"`
					OutBytes uint64 `json:"out_bytes"`
				} `json:"connections"`
			}
			url := fmt.Sprintf("http://127.0.0.1:%d/connz?limit=1024&offset=%d", n.HTTPPort, offset)
			if err := getJSON(ctx, url, &cz); err != nil {
				return nil, 0, err
			}
			for _, c := range cz.Conns {
				conns++
				id, ok := strings.CutPrefix(c.Name, "handoff-agent-")
				if !ok {
					continue
				}
				id, _, _ = strings.Cut(id, " ")
				cc := out[id]
				cc.msgsOut += c.InMsgs
				cc.msgsIn += c.OutMsgs
				cc.bytesOut += c.InBytes
				cc.bytesIn += c.OutBytes
				out[id] = cc
			}
			offset += len(cz.Conns)
			if len(cz.Conns) == 0 || offset >= cz.Total {
				break
			}
		}
	}
	return out, conns, nil
}

// consumers counts the consumers of the group's KV and changelog streams
// (on the stream's leader).
func (g *scaleGroup) consumers(ctx context.Context) (kv, changelog int, err error) {
	for _, n := range g.servers {
		var jz struct {
			Accounts []struct {
				Streams []struct {
					Name    string `json:"name"`
					Cluster *struct {
						Leader string `json:"leader"`
					} `json:"cluster"`
					State struct {
						Consumers int `json:"consumer_count"`
					} `json:"state"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}
		if err := getJSON(ctx, fmt.Sprintf("http://127.0.0.1:%d/jsz?streams=true", n.HTTPPort), &jz); err != nil {
			return 0, 0, err
		}
		for _, a := range jz.Accounts {
			for _, st := range a.Streams {
				if st.Cluster != nil && st.Cluster.Leader != "" && st.Cluster.Leader != n.Name {
					continue
				}
				switch st.Name {
				case "KV_" + group.BucketName(g.name):
					kv = max(kv, st.State.Consumers)
				case "HANDOFF_" + g.name:
					changelog = max(changelog, st.State.Consumers)
				}
			}
		}
	}
	return kv, changelog, nil
}

// serverCPU is the servers' CPU time so far.
func (g *scaleGroup) serverCPU() time.Duration {
	var sum time.Duration
	for _, n := range g.servers {
		if d, ok := cpuTime(n.Proc.Pid()); ok {
			sum += d
		}
	}
	return sum
}

var monitorClient = &http.Client{Timeout: 30 * time.Second}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := monitorClient.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("get %s: %s: %s", url, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", url, err)
	}
	return nil
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	d, _ := cpuTime(os.Getpid())
	return d
}

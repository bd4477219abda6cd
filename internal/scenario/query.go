package scenario

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/client"
)

// Bounds a reader asks with.
const (
	BoundLatest = "latest"  // the default: every commit acknowledged before the query
	BoundMinSeq = "min_seq" // the newest sequence the reader has seen of the task
	BoundMaxLag = "max_lag" // a copy up to ReaderMaxLag messages behind
)

// ReaderMaxLag is the max_lag of the readers' lagged queries.
const ReaderMaxLag = 50

// QueryRead is one query a reader made and what came of it.
type QueryRead struct {
	Phase      string
	Task, Key  string
	Via        string // the member asked
	URL        string // its API
	Bound      string
	MinSeq     uint64
	Sent, Done time.Time
	// Status is the HTTP status; 0 when no answer came (Err says why).
	Status int
	Err    string
	// What the copy that answered said: the value (Found: present) at Seq.
	Found               bool
	Value               string
	Member, Role        string
	Seq                 uint64
	Routed, Unreachable bool
	answered            bool
}

// Readers query random keys of every stateful task through the members
// they are given, continuously, and keep every answer for Check. Stop
// them before checking.
type Readers struct {
	h      *Harness
	cancel context.CancelFunc
	wg     sync.WaitGroup
	http   *http.Client

	mu      sync.Mutex
	targets []*Member
	gone    map[string]bool // members taken out of the targets: their failures are unreachable
	phase   string
	reads   []QueryRead
	seen    map[string]uint64 // task → newest seq an answer reported
}

// StartReaders starts n readers on the members ids, each pacing its
// queries every interval, in phase.
func (h *Harness) StartReaders(n int, interval time.Duration, phase string, ids ...string) *Readers {
	ctx, cancel := context.WithCancel(context.Background())
	var targets []*Member
	for _, id := range ids {
		targets = append(targets, h.Member(id))
	}
	r := &Readers{h: h, cancel: cancel, targets: targets, gone: map[string]bool{}, phase: phase, seen: map[string]uint64{},
		http: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	for i := range n {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.run(ctx, rand.New(rand.NewPCG(uint64(i)+1, uint64(time.Now().UnixNano()))), interval)
		}()
	}
	return r
}

// Phase records the reads from now on under name.
func (r *Readers) Phase(name string) {
	r.mu.Lock()
	r.phase = name
	r.mu.Unlock()
}

// Drop stops querying member id (before it is stopped, as a load balancer
// takes a terminating pod out); a query to it still under way that gets
// no answer counts as unreachable, not failed.
func (r *Readers) Drop(id string) {
	r.mu.Lock()
	r.targets = slices.DeleteFunc(r.targets, func(m *Member) bool { return m.ID == id })
	r.gone[id] = true
	r.mu.Unlock()
}

// Add queries member id too, once its agent serves; call it from the
// goroutine that starts members.
func (r *Readers) Add(id string) {
	m := r.h.Member(id)
	r.mu.Lock()
	r.targets = slices.DeleteFunc(r.targets, func(t *Member) bool { return t.ID == id })
	r.targets = append(r.targets, m)
	delete(r.gone, id)
	r.mu.Unlock()
}

// Stop ends the readers and waits for their last queries.
func (r *Readers) Stop() {
	r.cancel()
	r.wg.Wait()
}

// Reads returns every read so far.
func (r *Readers) Reads() []QueryRead {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reads)
}

func (r *Readers) run(ctx context.Context, rng *rand.Rand, interval time.Duration) {
	tick := time.NewTicker(interval) // paces the queries; nothing waits on it
	defer tick.Stop()
	tasks := r.h.Stateful()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.mu.Lock()
		if len(r.targets) == 0 {
			r.mu.Unlock()
			continue
		}
		m := r.targets[rng.IntN(len(r.targets))]
		q := QueryRead{Phase: r.phase, Via: m.ID, URL: m.URL(),
			Task: tasks[rng.IntN(len(tasks))], Key: "k" + strconv.Itoa(rng.IntN(r.h.opts.Keys+2))}
		switch n := rng.IntN(4); {
		case n < 2:
			q.Bound = BoundLatest
		case n == 2:
			q.Bound, q.MinSeq = BoundMinSeq, r.seen[q.Task]
		default:
			q.Bound = BoundMaxLag
		}
		r.mu.Unlock()
		r.ask(ctx, &q)
		r.mu.Lock()
		if q.answered {
			r.seen[q.Task] = max(r.seen[q.Task], q.Seq)
		}
		if !q.answered && r.gone[q.Via] {
			q.Unreachable = true
		}
		r.reads = append(r.reads, q)
		r.mu.Unlock()
	}
}

// ask makes q's query through member q.Via at q.URL.
func (r *Readers) ask(ctx context.Context, q *QueryRead) {
	params := url.Values{"timeout": {"30s"}}
	switch q.Bound {
	case BoundMinSeq:
		params.Set("min_seq", strconv.FormatUint(q.MinSeq, 10))
	case BoundMaxLag:
		params.Set("max_lag", strconv.Itoa(ReaderMaxLag))
	}
	target := q.URL + "/query/tasks/" + q.Task + "/state/" + url.PathEscape(q.Key) + "?" + params.Encode()
	q.Sent = time.Now()
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, target, nil)
	if err != nil {
		q.Err = err.Error()
		return
	}
	resp, err := r.http.Do(req)
	q.Done = time.Now()
	if err != nil {
		q.Err = err.Error()
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	q.Done = time.Now()
	q.Status = resp.StatusCode
	if err != nil {
		q.Err = err.Error()
		return
	}
	q.Member, q.Role = resp.Header.Get(api.HeaderServedBy), resp.Header.Get(api.HeaderRole)
	q.Routed = resp.Header.Get(api.HeaderRouted) == "true"
	seq, serr := strconv.ParseUint(resp.Header.Get(api.HeaderSeq), 10, 64)
	switch {
	case resp.StatusCode == http.StatusOK && serr == nil:
		q.Found, q.Value, q.Seq, q.answered = true, string(body), seq, true
	case resp.StatusCode == http.StatusNotFound && serr == nil && q.Member != "":
		q.Seq, q.answered = seq, true
	default:
		q.Err = strings.TrimSpace(string(body))
	}
}

// PhaseStats are a phase's reads.
type PhaseStats struct {
	Phase                             string
	Total, Failed, Wrong, Unreachable int
	Local, Routed                     int
	ByBound                           map[string]int
	MaxLatency                        map[string]time.Duration // by bound, of the answered reads
	FailedSamples, WrongSamples       []string
	ServedBy                          map[string]int // role → answers
}

// CheckReads judges every read against the changelog: an answer at seq S
// must be the task's state after the changelog up to S (S one of the
// task's sequences, or 0), a default-bound answer must reflect every
// commit acknowledged (by the workers' event logs) before it was sent, and
// a min_seq answer must be at min_seq or later. It returns the stats of
// each phase in the order the phases came.
func (h *Harness) CheckReads(reads []QueryRead) []PhaseStats {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	byTask := map[string][]int{}
	for i, q := range reads {
		if q.answered {
			byTask[q.Task] = append(byTask[q.Task], i)
		}
	}
	acks := map[string][]ackAt{}
	for _, e := range h.allEvents() {
		if e.Type == client.EventCommit {
			acks[e.Task] = append(acks[e.Task], ackAt{e.Time, e.Seq})
		}
	}
	wrong := make([]string, len(reads))
	for task, idx := range byTask {
		recs, err := changelog.ReadTask(ctx, h.js, h.opts.Group, task)
		if err != nil {
			h.t.Fatalf("read the changelog of %s: %v", task, err)
		}
		seqs := map[uint64]bool{0: true}
		for _, rec := range recs {
			seqs[rec.Seq] = true
		}
		sort.Slice(idx, func(a, b int) bool { return reads[idx[a]].Seq < reads[idx[b]].Seq })
		ta := acks[task]
		sort.Slice(ta, func(a, b int) bool { return ta[a].t.Before(ta[b].t) })
		state, next := map[string]string{}, 0
		for _, i := range idx {
			q := reads[i]
			for next < len(recs) && recs[next].Seq <= q.Seq {
				for _, kv := range recs[next].Entry.Puts {
					state[string(kv.Key)] = string(kv.Value)
				}
				for _, k := range recs[next].Entry.Deletes {
					delete(state, string(k))
				}
				next++
			}
			want, found := state[q.Key]
			switch {
			case !seqs[q.Seq]:
				wrong[i] = fmt.Sprintf("answered at seq %d, which is none of the changelog's", q.Seq)
			case found != q.Found || want != q.Value:
				wrong[i] = fmt.Sprintf("%q (found %v) at seq %d, but the changelog gives %q (found %v)", q.Value, q.Found, q.Seq, want, found)
			case q.Bound == BoundMinSeq && q.Seq < q.MinSeq:
				wrong[i] = fmt.Sprintf("answered at seq %d, below its min_seq %d", q.Seq, q.MinSeq)
			case q.Bound == BoundLatest:
				if acked := ackedBefore(ta, q.Sent); acked > q.Seq {
					wrong[i] = fmt.Sprintf("answered at seq %d, but the commit at seq %d was acknowledged before the query was sent", q.Seq, acked)
				}
			}
		}
	}
	var out []PhaseStats
	at := map[string]int{}
	for i, q := range reads {
		k, ok := at[q.Phase]
		if !ok {
			k = len(out)
			at[q.Phase] = k
			out = append(out, PhaseStats{Phase: q.Phase, ByBound: map[string]int{}, MaxLatency: map[string]time.Duration{}, ServedBy: map[string]int{}})
		}
		s := &out[k]
		s.Total++
		s.ByBound[q.Bound]++
		desc := fmt.Sprintf("%s %s/%s via %s (%s)", q.Sent.Format("15:04:05.000"), q.Task, q.Key, q.Via, q.Bound)
		switch {
		case q.Unreachable:
			s.Unreachable++
		case !q.answered:
			s.Failed++
			if len(s.FailedSamples) < 5 {
				s.FailedSamples = append(s.FailedSamples, fmt.Sprintf("%s: status %d %s", desc, q.Status, q.Err))
			}
		case wrong[i] != "":
			s.Wrong++
			if len(s.WrongSamples) < 5 {
				s.WrongSamples = append(s.WrongSamples, fmt.Sprintf("%s from %s: %s", desc, q.Member, wrong[i]))
			}
		}
		if q.answered {
			s.ServedBy[q.Role]++
			if q.Routed {
				s.Routed++
			} else {
				s.Local++
			}
			s.MaxLatency[q.Bound] = max(s.MaxLatency[q.Bound], q.Done.Sub(q.Sent))
		}
	}
	return out
}

type ackAt struct {
	t   time.Time
	seq uint64
}

// ackedBefore returns the highest seq of the commits acknowledged before t.
func ackedBefore(acks []ackAt, t time.Time) uint64 {
	var seq uint64
	for _, a := range acks {
		if !a.t.Before(t) {
			break
		}
		seq = max(seq, a.seq)
	}
	return seq
}

// LogPhases prints each phase's failed, wrong and total reads.
func (h *Harness) LogPhases(stats []PhaseStats) {
	h.t.Helper()
	for _, s := range stats {
		h.Logf("queries, %-16s %5d reads: %d failed, %d wrong, %d unreachable (its member stopping); %d local, %d routed; by bound %v; served by %v; slowest by bound %v",
			s.Phase+":", s.Total, s.Failed, s.Wrong, s.Unreachable, s.Local, s.Routed, s.ByBound, s.ServedBy, roundAll(s.MaxLatency))
		for _, f := range s.FailedSamples {
			h.Logf("  failed: %s", f)
		}
		for _, w := range s.WrongSamples {
			h.Logf("  wrong: %s", w)
		}
	}
}

func roundAll(m map[string]time.Duration) map[string]string {
	out := map[string]string{}
	for k, d := range m {
		out[k] = d.Round(time.Millisecond).String()
	}
	return out
}

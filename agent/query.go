package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/statestore"
)

// Queries of any task's state (docs/ARCHITECTURE.md, "Queries: which copy
// may answer"). Every copy of a task is a prefix of the task's changelog:
// an owner applies only what it appended, fenced, and a tailer applies the
// changelog in order. So a copy that has applied sequence S holds exactly
// the state the changelog gives at S, whoever holds it and whatever its
// role, and a query's bound is a question about sequences:
//   - min_seq=S: a copy whose applied sequence is at least S;
//   - the default bound: min_seq = the subject's last sequence, read from
//     the stream's leader after the query arrived, which every commit
//     acknowledged before the query is at or below;
//   - max_lag=N: a copy that is N messages behind the subject's end or
//     less, as it last heard from the server, on a member whose session is
//     live (a paused member's is not).
// A member answers from its own copy when it meets the bound, and
// otherwise asks the group: every member subscribes to the query subject
// of each stateful task it holds an entry for, and a copy answers only a
// request it meets.

// queries is the member's side of the queries: the subscriptions its
// copies answer on, the requests it routes, and the coalesced reads of
// each task's last sequence.
type queries struct {
	a   *Agent
	req *group.Requester
	log zerolog.Logger
	m   *queryMetrics

	mu     sync.Mutex
	subs   map[string]*nats.Subscription
	lasts  map[string]*lastReads
	closed bool
}

// newQueries subscribes to the answers of the queries this member routes.
func newQueries(a *Agent) (*queries, error) {
	req, err := group.NewRequester(a.nc, a.opts.Group)
	if err != nil {
		return nil, err
	}
	return &queries{a: a, req: req, log: a.log, m: newQueryMetrics(a.opts.Registerer),
		subs: map[string]*nats.Subscription{}, lasts: map[string]*lastReads{}}, nil
}

// hold makes the member's copy of a stateful task answer the group's
// queries. A task's entry is never removed from the member, nor its local
// copy, so neither is the subscription until the agent closes.
func (q *queries) hold(t *task) {
	if !t.stateful {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.subs[t.id] != nil {
		return
	}
	sub, err := q.a.nc.Subscribe(group.QuerySubject(q.a.opts.Group, t.id), func(m *nats.Msg) { q.serve(t, m) })
	if err != nil {
		q.log.Warn().Err(err).Str(fTask, t.id).Msg("subscribe to the task's queries; this member's copy answers none")
		return
	}
	q.subs[t.id] = sub
}

// close ends every subscription.
func (q *queries) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	for _, s := range q.subs {
		_ = s.Unsubscribe()
	}
	_ = q.req.Close()
}

// serve answers a request for t's state if this member's copy meets it.
func (q *queries) serve(t *task, m *nats.Msg) {
	if m.Reply == "" || q.a.bgCtx.Err() != nil {
		return
	}
	req, err := group.DecodeQuery(m.Data)
	if err != nil {
		q.log.Debug().Err(err).Str(fTask, t.id).Msg("a query this member cannot read")
		return
	}
	a, met, err := q.a.answer(t, req)
	if !met {
		return
	}
	tooLarge := ""
	if err != nil {
		if !errors.Is(err, api.ErrTooLarge) {
			return // the store failed: another copy may answer
		}
		tooLarge = err.Error()
	}
	if err := m.Respond(group.EncodeAnswer(nil, req.Kind, a, tooLarge)); err == nil {
		q.m.answered.Inc()
	}
}

// Query implements httpapi.Backend: q's answer, from this member's copy
// when it meets q's bound, otherwise from the first copy in the group that
// does, asked over NATS until q's timeout (then ErrUnavailable).
func (a *Agent) Query(ctx context.Context, q api.Query) (api.QueryAnswer, error) {
	start := time.Now()
	stateful, ok := a.taskKind(q.Task)
	switch {
	case !ok:
		return api.QueryAnswer{}, fmt.Errorf("%w: task %s is not in group %s; the group's tasks are in /group", api.ErrUnknownTask, q.Task, a.opts.Group)
	case !stateful:
		return api.QueryAnswer{}, fmt.Errorf("%w: task %s is stateless: it has no state to query", api.ErrInvalid, q.Task)
	}
	timeout := q.Timeout
	if timeout <= 0 {
		timeout = api.DefaultQueryTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, min(timeout, api.MaxQueryTimeout))
	defer cancel()
	req := group.QueryRequest{Kind: q.Kind, Bound: q.Bound, Keys: q.Keys, MaxBytes: q.MaxBytes, Scan: q.Scan}
	ans, err := a.query(ctx, q.Task, req)
	switch {
	case err == nil && ans.Routed:
		a.queries.m.observe(servedRouted, start)
	case err == nil, errors.Is(err, api.ErrTooLarge):
		a.queries.m.observe(servedLocal, start)
	default:
		a.queries.m.observe(servedRefused, start)
	}
	return ans, err
}

func (a *Agent) query(ctx context.Context, id string, req group.QueryRequest) (api.QueryAnswer, error) {
	if req.Bound.Latest() {
		last, err := a.queries.last(ctx, id)
		if err != nil {
			return api.QueryAnswer{}, fmt.Errorf("%w: %w; retry", api.ErrUnavailable, err)
		}
		// Every copy has applied sequence 0: an empty subject's state
		// (none) is any member's to give.
		req.Bound.MinSeq = last
	}
	a.mu.Lock()
	t := a.tasks[id]
	a.mu.Unlock()
	if t != nil || req.Bound.Latest() {
		if t == nil {
			t = &task{id: id, stateful: true} // no copy here: an empty one at 0
		}
		ans, met, err := a.answer(t, req)
		if met && err == nil || errors.Is(err, api.ErrTooLarge) {
			return ans, err
		}
	}
	got, err := a.queries.req.Ask(ctx, id, req)
	if err != nil {
		return api.QueryAnswer{}, fmt.Errorf("%w: no copy of task %s met the query's bound (%s) within its timeout (%w); retry, or accept a staler copy with max_lag", api.ErrUnavailable, id, boundString(req.Bound), err)
	}
	// This member's own copy may answer the request, once it meets the
	// bound: then it was served here.
	got.Routed = got.Member != a.opts.MemberID
	return got.QueryAnswer, got.Err
}

// boundString says what a resolved bound asks for, for messages.
func boundString(b api.Bound) string {
	if b.Lagged {
		return fmt.Sprintf("max_lag=%d, min_seq=%d", b.MaxLag, b.MinSeq)
	}
	return fmt.Sprintf("applied sequence %d or more", b.MinSeq)
}

// answer reads req from t's copy on this member if the copy meets req's
// bound (met). The meta and the keys come from one view of the store, so
// the answer is the state at the sequence it reports.
func (a *Agent) answer(t *task, req group.QueryRequest) (api.QueryAnswer, bool, error) {
	t.mu.Lock()
	phase := t.phase
	t.mu.Unlock()
	v, err := a.store.View(t.id)
	if err != nil {
		return api.QueryAnswer{}, false, err
	}
	defer v.Close()
	meta, _ := v.Meta()
	if !a.meets(t, phase, meta.Applied, req.Bound) {
		return api.QueryAnswer{}, false, nil
	}
	ans := api.QueryAnswer{Served: api.Served{Member: a.opts.MemberID, Role: queryRole(phase), Seq: meta.Applied}}
	switch req.Kind {
	case api.QueryGet, api.QueryGetMany:
		ans.Values, err = v.GetMany(req.Keys, req.MaxBytes)
		if errors.Is(err, statestore.ErrTooLarge) {
			return ans, true, fmt.Errorf("%w: the values of these %d keys of task %s total more than %d bytes; ask for fewer keys at a time", api.ErrTooLarge, len(req.Keys), t.id, req.MaxBytes)
		}
	case api.QueryScan:
		var kvs []statestore.KV
		kvs, err = v.Scan(statestore.ScanOptions{Prefix: req.Scan.Prefix, Start: req.Scan.Start, Limit: req.Scan.Limit})
		ans.Items = make([]api.KV, len(kvs))
		for i, kv := range kvs {
			ans.Items[i] = api.KV{Key: kv.Key, Value: kv.Value}
		}
	default:
		err = fmt.Errorf("%w: unknown query kind %d", api.ErrInvalid, req.Kind)
	}
	if err != nil {
		return api.QueryAnswer{}, false, err
	}
	return ans, true, nil
}

// meets reports whether t's copy, in phase and at applied, meets bound. A
// lag is known only for the active owner (none) and for a learner or
// standby (its tailer's, as of the server's last delivery); and only while
// this member's session is live, since a paused process cannot tell how
// far the group has moved meanwhile.
func (a *Agent) meets(t *task, phase taskPhase, applied uint64, b api.Bound) bool {
	if applied < b.MinSeq {
		return false
	}
	if !b.Lagged {
		return true
	}
	if !a.sessionLive() {
		return false
	}
	switch {
	case phase == phaseActive:
		return true
	case phase.tailing():
		r := t.replayer.Load()
		if r == nil {
			return false
		}
		p := r.Progress()
		return !p.Started.IsZero() && p.LagMsgs <= b.MaxLag && applied >= p.Applied
	}
	return false
}

// queryRole names t's role in an answer.
func queryRole(p taskPhase) string {
	switch p {
	case phaseActive, phaseLearner, phaseStandby:
		return p.role()
	}
	return api.RoleCopy
}

// lastReadTimeout bounds one read of a task's last sequence; a query
// that waited for it and still has time reads it again.
const lastReadTimeout = 2 * time.Second

// last returns task's last sequence, read from the stream's leader after
// this call began. Reads are coalesced per task: a call joins the next
// read to start, never one already under way (that one may have read
// before the call began), so one round trip serves every query that
// arrived while the previous one was out.
func (q *queries) last(ctx context.Context, task string) (uint64, error) {
	q.mu.Lock()
	lr := q.lasts[task]
	if lr == nil {
		lr = &lastReads{}
		q.lasts[task] = lr
	}
	q.mu.Unlock()
	for {
		seq, err := lr.read(ctx, func(ctx context.Context) (uint64, error) {
			return q.a.clog.LastFromLeader(ctx, task)
		})
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return seq, err
		}
	}
}

// lastReads coalesces the reads of one task's last sequence.
type lastReads struct {
	mu      sync.Mutex
	running *lastRead // under way
	next    *lastRead // starts when running ends; callers since it began join it
}

type lastRead struct {
	done chan struct{}
	seq  uint64
	err  error
}

// read returns the result of a read that starts after read was called.
// The caller that creates a read runs it, on its own goroutine, after
// the one under way.
func (l *lastReads) read(ctx context.Context, do func(context.Context) (uint64, error)) (uint64, error) {
	l.mu.Lock()
	var (
		r     *lastRead
		after *lastRead // the read to wait for before running r
		runs  bool
	)
	switch {
	case l.running == nil:
		r = &lastRead{done: make(chan struct{})}
		l.running, runs = r, true
	case l.next == nil:
		r = &lastRead{done: make(chan struct{})}
		l.next, after, runs = r, l.running, true
	default:
		r = l.next
	}
	l.mu.Unlock()
	if runs {
		if after != nil {
			<-after.done // bounded by lastReadTimeout
			l.mu.Lock()
			l.running, l.next = r, nil
			l.mu.Unlock()
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastReadTimeout)
		r.seq, r.err = do(rctx)
		cancel()
		l.mu.Lock()
		if l.running == r {
			l.running = nil
		}
		l.mu.Unlock()
		close(r.done)
	}
	select {
	case <-r.done:
		return r.seq, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// How a query was served, the label of the query metrics.
const (
	servedLocal   = "local"
	servedRouted  = "routed"
	servedRefused = "refused"
)

// queryMetrics count the queries this member was asked and the answers
// its copies gave to the group.
type queryMetrics struct {
	queries                         *prometheus.CounterVec
	seconds                         *prometheus.HistogramVec
	answered                        prometheus.Counter
	local, routed, refused          prometheus.Counter
	localSec, routedSec, refusedSec prometheus.Observer
}

func newQueryMetrics(reg prometheus.Registerer) *queryMetrics {
	m := &queryMetrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_queries_total",
			Help: "Queries of a task's state this member was asked (GET/POST /query/...), by how they were served: local (this member's copy met the bound), routed (another member's copy answered over NATS) or refused (no copy met the bound within the query's timeout: 503).",
		}, []string{"served"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "handoff_query_seconds",
			Help:    "Latency of the queries this member was asked, by how they were served, from the call to the answer (a refused query: its timeout).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18),
		}, []string{"served"}),
		answered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handoff_query_answers_total",
			Help: "Queries routed by other members (or handoff query) that this member's copies answered over NATS.",
		}),
	}
	m.local, m.routed, m.refused = m.queries.WithLabelValues(servedLocal), m.queries.WithLabelValues(servedRouted), m.queries.WithLabelValues(servedRefused)
	m.localSec, m.routedSec, m.refusedSec = m.seconds.WithLabelValues(servedLocal), m.seconds.WithLabelValues(servedRouted), m.seconds.WithLabelValues(servedRefused)
	if reg != nil {
		reg.MustRegister(m.queries, m.seconds, m.answered)
	}
	return m
}

func (m *queryMetrics) observe(served string, start time.Time) {
	d := time.Since(start).Seconds()
	switch served {
	case servedLocal:
		m.local.Inc()
		m.localSec.Observe(d)
	case servedRouted:
		m.routed.Inc()
		m.routedSec.Observe(d)
	default:
		m.refused.Inc()
		m.refusedSec.Observe(d)
	}
}

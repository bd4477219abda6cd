package bench

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/api"
)

// scaleWorker is the scale scenario's worker: light, in this process, and
// calling its agent directly (the API's Backend) instead of over HTTP. It
// long-polls the member's view, commits once to every task that becomes
// active here (and every CommitPace after, if set), releases what is
// revoked at once, and tells the recorder what it saw.
type scaleWorker struct {
	id   string
	a    *agent.Agent
	rec  *scaleRecorder
	pace time.Duration

	mu       sync.Mutex
	active   map[string]uint64 // task -> epoch, as the last view showed it
	waiting  int               // tasks shown as learner or standby
	revoking int
	shutdown bool
}

func newScaleWorker(id string, a *agent.Agent, rec *scaleRecorder, pace time.Duration) *scaleWorker {
	return &scaleWorker{id: id, a: a, rec: rec, pace: pace, active: map[string]uint64{}}
}

// state is what the worker holds now: active tasks, tasks on their way
// here, tasks under revoke, and whether it was told to shut down.
func (w *scaleWorker) state() (active, waiting, revoking int, shutdown bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.active), w.waiting, w.revoking, w.shutdown
}

// activeTasks lists the tasks active here.
func (w *scaleWorker) activeTasks() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.active))
	for t := range w.active {
		out = append(out, t)
	}
	return out
}

// run works until ctx ends.
func (w *scaleWorker) run(ctx context.Context) {
	var after uint64
	var commits sync.WaitGroup
	defer commits.Wait()
	nextCommit := map[string]time.Time{}
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, w.pollWait())
		v := w.a.WaitAssignment(pctx, after)
		cancel()
		if ctx.Err() != nil {
			return
		}
		after = v.Version
		now := time.Now()
		revoked := map[string]bool{}
		for _, id := range v.Revoke {
			revoked[id] = true
		}
		active := map[string]uint64{}
		waiting := 0
		w.mu.Lock()
		for _, t := range v.Tasks {
			if t.Role != api.RoleActive {
				waiting++
				continue
			}
			active[t.ID] = t.Epoch
			if e, ok := w.active[t.ID]; ok && e == t.Epoch {
				continue
			}
			// Newly active here: served from now on.
			w.rec.activated(t.ID, w.id, now)
			nextCommit[t.ID] = now.Add(w.pace)
			commits.Add(1)
			go func(task string, epoch uint64) {
				defer commits.Done()
				if w.commit(ctx, task, epoch) {
					w.rec.committed(task, w.id, time.Now())
				}
			}(t.ID, t.Epoch)
		}
		w.active, w.waiting, w.revoking, w.shutdown = active, waiting, len(revoked), v.Shutdown
		w.mu.Unlock()
		for id := range revoked {
			w.rec.released(id, w.id, time.Now())
			if _, err := w.a.Release(ctx, id, active[id]); err != nil {
				w.rec.note("release " + id + " on " + w.id + ": " + err.Error())
			}
		}
		if w.pace > 0 {
			for id, at := range nextCommit {
				if _, ok := active[id]; !ok || revoked[id] {
					delete(nextCommit, id)
					continue
				}
				if !now.Before(at) {
					nextCommit[id] = now.Add(w.pace)
					w.commit(ctx, id, active[id])
				}
			}
		}
	}
}

// pollWait is how long one long-poll waits: the commit pace, or 30 s.
func (w *scaleWorker) pollWait() time.Duration {
	if w.pace > 0 {
		return w.pace
	}
	return 30 * time.Second
}

// commit commits one record to task at epoch; it reports whether the
// commit was acknowledged.
func (w *scaleWorker) commit(ctx context.Context, task string, epoch uint64) bool {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	now := strconv.FormatInt(time.Now().UnixNano(), 10)
	_, err := w.a.Commit(cctx, task, api.CommitRequest{
		Puts:       []api.KV{{Key: []byte("k"), Value: []byte(w.id + "@" + now)}},
		Checkpoint: []byte(now),
		Epoch:      epoch,
	})
	return err == nil
}

// scaleRecorder pairs what the workers saw into pauses: a release with the
// next activation of the task elsewhere (a planned move), a kill with the
// activation of each of the killed member's tasks elsewhere (a failover).
type scaleRecorder struct {
	mu          sync.Mutex
	releasedAt  map[string]moveStart // task -> its release, until it is active elsewhere
	killedAt    map[string]moveStart // task -> its owner's kill, likewise
	activeAt    map[string]time.Time // task -> when its new owner's worker saw it active, until its first commit
	moves       int
	pauses      []time.Duration
	commits     []time.Duration
	failovers   []time.Duration
	notes       []string
	noteDropped int
}

type moveStart struct {
	from string
	at   time.Time
}

func newScaleRecorder() *scaleRecorder {
	return &scaleRecorder{releasedAt: map[string]moveStart{}, killedAt: map[string]moveStart{}, activeAt: map[string]time.Time{}}
}

func (r *scaleRecorder) released(task, member string, at time.Time) {
	r.mu.Lock()
	r.releasedAt[task] = moveStart{member, at}
	r.mu.Unlock()
}

// killed records that member, which held tasks, was killed at at.
func (r *scaleRecorder) killed(member string, tasks []string, at time.Time) {
	r.mu.Lock()
	for _, t := range tasks {
		r.killedAt[t] = moveStart{member, at}
	}
	r.mu.Unlock()
}

func (r *scaleRecorder) activated(task, member string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.releasedAt[task]; ok && s.from != member {
		delete(r.releasedAt, task)
		r.pauses = append(r.pauses, at.Sub(s.at))
		r.activeAt[task] = s.at
		r.moves++
		return
	}
	if s, ok := r.killedAt[task]; ok && s.from != member {
		delete(r.killedAt, task)
		r.failovers = append(r.failovers, at.Sub(s.at))
		r.moves++
		return
	}
	r.moves++
}

func (r *scaleRecorder) committed(task, member string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.activeAt[task]; ok {
		delete(r.activeAt, task)
		r.commits = append(r.commits, at.Sub(s))
	}
}

// note keeps a worker's trouble for the report (the first few).
func (r *scaleRecorder) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.notes) < 5 {
		r.notes = append(r.notes, s)
	} else {
		r.noteDropped++
	}
}

// take returns what was recorded since the last take and starts afresh;
// pending kills stay (their tasks are not served yet).
func (r *scaleRecorder) take() (moves int, pauses, commits, failovers []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	moves, pauses, commits, failovers = r.moves, r.pauses, r.commits, r.failovers
	r.moves, r.pauses, r.commits, r.failovers = 0, nil, nil, nil
	return moves, pauses, commits, failovers
}

// unserved is how many tasks of killed members are not active elsewhere yet.
func (r *scaleRecorder) unserved() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.killedAt)
}

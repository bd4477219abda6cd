package lab

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/record"
)

// Recorder keeps what happened in a lab: every member's role for every task
// over time (sampled), every worker event (exact), every progress report,
// the generations, the operations, and when the group was steady. It is
// safe for concurrent use.
type Recorder struct {
	tasks    []assign.Task
	stateful map[string]bool
	onNote   func(Note)

	mu       sync.Mutex
	spans    []Span          // closed spans
	open     map[pair]*Span  // open spans
	marks    []Mark          // operations and milestones
	events   []record.Event  // every worker event
	reports  []Report        // every progress report
	latest   map[pair]Report // the latest report of each pair
	gens     []GenChange
	steady   []SteadyChange
	group    api.GroupView // the latest group view read
	running  map[string]runningTask
	released map[string]handoff // the last release of each task, until its next start
	// stopped is the last stop of each task, until its next start: a
	// direct hand-off may start the task on its next owner before the
	// release call that follows the stop has returned.
	stopped map[string]handoff
	lost    map[string]handoff // tasks whose owner crashed, until their next start
	caught  map[pair]bool      // learners already said to have caught up
	joined  map[string]bool    // members already seen in a generation
	last    sample             // the latest sample
	sampled chan struct{}      // closed and replaced after every sample

	committed        map[string]uint64 // checkpoint of each task's last commit
	committedRecords uint64
	logs             map[string][]changelog.Record // changelogs read by Check
}

// pair names a task on a member.
type pair struct{ task, member string }

// runningTask is a task its worker runs: where, at which epoch, since when.
type runningTask struct {
	member string
	epoch  uint64
	since  time.Time
}

// handoff is where a task left from: a release or a crash.
type handoff struct {
	member string
	epoch  uint64
	at     time.Time
	crash  bool
}

// sample is one look at every running member.
type sample struct {
	at      time.Time
	members []memberSample
	roles   map[pair]string
	epochs  map[pair]uint64
	gen     uint64
	leader  string
	steady  bool
}

// memberSample is one member as the sampler saw it.
type memberSample struct {
	id      string
	state   string // lab state: Member*
	running bool
	view    api.View
	leading bool
	// stale says the member runs but did not answer in time: the
	// recorder keeps what it saw of it last.
	stale bool
}

func newRecorder(tasks []assign.Task, onNote func(Note)) *Recorder {
	r := &Recorder{
		tasks: tasks, stateful: map[string]bool{}, onNote: onNote,
		open: map[pair]*Span{}, latest: map[pair]Report{},
		running: map[string]runningTask{}, released: map[string]handoff{}, stopped: map[string]handoff{}, lost: map[string]handoff{},
		caught: map[pair]bool{}, joined: map[string]bool{}, sampled: make(chan struct{}),
		committed: map[string]uint64{},
	}
	for _, t := range tasks {
		r.stateful[t.ID] = t.Stateful
	}
	return r
}

// note passes a note to the callback. Callers hold r.mu.
func (r *Recorder) noteLocked(at time.Time, format string, args ...any) {
	if r.onNote != nil {
		r.onNote(Note{At: at, Text: fmt.Sprintf(format, args...)})
	}
}

// Mark records a caller's milestone, shown on timelines.
func (r *Recorder) Mark(text string) time.Time {
	m := Mark{At: time.Now(), Kind: MarkPhase, Text: text}
	r.mark(m)
	return m.At
}

// mark records an operation and tells about it.
func (r *Recorder) mark(m Mark) {
	if m.At.IsZero() {
		m.At = time.Now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.marks = append(r.marks, m)
	switch m.Kind {
	case MarkJoin:
		r.noteLocked(m.At, "%s started: it joins the group", m.Member)
	case MarkLeave:
		r.noteLocked(m.At, "%s leaving (POST /leave): its tasks are warmed on the others first", m.Member)
	case MarkLeft:
		r.noteLocked(m.At, "%s handed everything over and stopped", m.Member)
	case MarkCrash:
		r.noteLocked(m.At, "%s crashed: its tasks wait for its session to expire", m.Member)
		r.unsteadyLocked(m.At)
		for task, rt := range r.running {
			if rt.member == m.Member {
				r.lost[task] = handoff{member: m.Member, epoch: rt.epoch, at: m.At, crash: true}
				delete(r.running, task)
			}
		}
	case MarkStop:
		r.noteLocked(m.At, "%s stopped without a leave", m.Member)
	case MarkRestart:
		r.noteLocked(m.At, "%s restarted with its local state", m.Member)
	}
}

// workerEvent records a worker event, and tells about moves.
func (r *Recorder) workerEvent(e record.Event) {
	member := e.Member
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	switch e.Type {
	case client.EventStart:
		r.running[e.Task] = runningTask{member: member, epoch: e.Epoch, since: e.Time}
		from, ok := r.released[e.Task]
		if st, stopped := r.stopped[e.Task]; stopped && (!ok || st.member == from.member && st.epoch == from.epoch) {
			// The pause starts when the old owner's worker stopped, before
			// its release (which may come after this start).
			from, ok = st, true
		}
		delete(r.stopped, e.Task)
		if lost, crashed := r.lost[e.Task]; crashed && (!ok || lost.at.After(from.at)) {
			from, ok = lost, true
		}
		switch {
		case ok && from.epoch < e.Epoch:
			verb := "moved"
			if from.crash {
				verb = "failed over"
			}
			r.noteLocked(e.Time, "%s %s %s → %s, paused %s", e.Task, verb, from.member, member, FormatPause(e.Time.Sub(from.at)))
			delete(r.released, e.Task)
			delete(r.lost, e.Task)
		case ok && from.epoch == e.Epoch && from.member == member && !from.crash:
			// The move was called off after the release: the owner
			// serves the task again.
			r.noteLocked(e.Time, "%s stays on %s (move called off), paused %s", e.Task, member, FormatPause(e.Time.Sub(from.at)))
			delete(r.released, e.Task)
		}
	case client.EventStop:
		if rt, ok := r.running[e.Task]; ok && rt.member == member && rt.epoch == e.Epoch {
			delete(r.running, e.Task)
			r.stopped[e.Task] = handoff{member: member, epoch: e.Epoch, at: e.Time}
			r.unsteadyLocked(e.Time)
		}
	case client.EventRelease:
		if rt, ok := r.running[e.Task]; ok && rt.epoch > e.Epoch {
			break // its next owner started it before this release call returned
		}
		at := e.Time
		if st, ok := r.stopped[e.Task]; ok && st.member == member && st.epoch == e.Epoch {
			at = st.at
		}
		r.released[e.Task] = handoff{member: member, epoch: e.Epoch, at: at}
		r.unsteadyLocked(e.Time)
	case client.EventCommit:
		r.committed[e.Task] = max(r.committed[e.Task], e.Checkpoint)
		r.committedRecords += uint64(e.Records)
	}
}

// progress records a progress report heard over NATS.
func (r *Recorder) progress(p api.LearnerProgress) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{Heard: now, LearnerProgress: p}
	r.reports = append(r.reports, rep)
	k := pair{p.Task, p.Member}
	r.latest[k] = rep
	if p.Role == api.RoleLearner && p.Lag == 0 && p.Replayed > 0 && !r.caught[k] && r.roleLocked(k) == RoleLearner {
		r.caught[k] = true
		r.noteLocked(now, "%s caught up on %s (replayed %d changelog messages)", p.Task, p.Member, p.Replayed)
	}
}

func (r *Recorder) roleLocked(k pair) string {
	if s := r.open[k]; s != nil {
		return s.Role
	}
	return ""
}

// setGroup records the latest group view read from NATS.
func (r *Recorder) setGroup(gv api.GroupView) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gv.Generation >= r.group.Generation {
		r.group = gv
	}
}

// groupGeneration is the generation of the latest group view.
func (r *Recorder) groupGeneration() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.group.Generation
}

// record takes in one sample of every running member.
func (r *Recorder) record(at time.Time, ms []memberSample) {
	r.mu.Lock()
	defer func() {
		close(r.sampled)
		r.sampled = make(chan struct{})
		r.mu.Unlock()
	}()
	prev := map[string]memberSample{}
	for _, m := range r.last.members {
		prev[m.id] = m
	}
	for i, m := range ms {
		if p, ok := prev[m.id]; ok && m.stale {
			p.state = m.state
			ms[i] = p
		}
	}
	s := sample{at: at, members: ms, roles: map[pair]string{}, epochs: map[pair]uint64{}}
	groupActive := map[string]string{}
	for _, t := range r.group.Tasks {
		groupActive[t.ID] = t.Active
	}
	var newLearners = map[string][]string{}
	for _, m := range ms {
		if !m.running {
			continue
		}
		if m.leading {
			s.leader = m.id
		}
		s.gen = max(s.gen, m.view.Generation)
		if m.view.State != api.StateJoining && !r.joined[m.id] {
			r.joined[m.id] = true
			r.noteLocked(at, "%s is in the group (generation %d)", m.id, m.view.Generation)
		}
		revoked := map[string]bool{}
		for _, id := range m.view.Revoke {
			revoked[id] = true
		}
		for _, tv := range m.view.Tasks {
			k := pair{tv.ID, m.id}
			role := tv.Role
			switch {
			case tv.Role == api.RoleActive && revoked[tv.ID]:
				role = RoleRevoking
			case tv.Role == api.RoleLearner:
				// An owner becoming active is shown to its worker as a
				// learner: the group's assignment at the member's
				// generation tells them apart. Without it, the role
				// stays as it was.
				current := r.group.Generation == m.view.Generation
				if current && groupActive[tv.ID] == m.id || !current && r.roleLocked(k) == RoleRestoring {
					role = RoleRestoring
				}
			}
			s.roles[k] = role
			s.epochs[k] = tv.Epoch
			if role == RoleLearner && r.roleLocked(k) != RoleLearner {
				newLearners[m.id] = append(newLearners[m.id], tv.ID)
				delete(r.caught, k)
			}
			if role == RoleRestoring && r.roleLocked(k) != RoleRestoring {
				r.noteLocked(at, "%s restoring on %s before it can serve", tv.ID, m.id)
			}
		}
	}
	for id, tasks := range newLearners {
		sort.Strings(tasks)
		r.noteLocked(at, "%s: %d learner%s warming (%s)", id, len(tasks), plural(len(tasks)), strings.Join(tasks, " "))
	}
	r.updateSpansLocked(at, s.roles)
	if n := len(r.gens); s.gen > 0 && (n == 0 || s.gen > r.gens[n-1].Generation) {
		r.gens = append(r.gens, GenChange{At: at, Generation: s.gen})
	}
	s.steady = r.steadyLocked(s)
	r.updateSteadyLocked(s)
	r.last = s
}

// updateSpansLocked closes the spans whose role changed and opens new ones.
func (r *Recorder) updateSpansLocked(at time.Time, roles map[pair]string) {
	for k, sp := range r.open {
		if roles[k] != sp.Role {
			sp.End = at
			r.spans = append(r.spans, *sp)
			delete(r.open, k)
		}
	}
	for k, role := range roles {
		if _, ok := r.open[k]; !ok {
			r.open[k] = &Span{Task: k.task, Member: k.member, Role: role, Start: at}
		}
	}
}

// steadyLocked tells whether every task is active on exactly one member
// whose worker runs it at the task's epoch, with nothing in flight.
func (r *Recorder) steadyLocked(s sample) bool {
	owners := map[string][]string{}
	for k, role := range s.roles {
		switch role {
		case RoleActive:
			owners[k.task] = append(owners[k.task], k.member)
		case RoleRevoking, RoleRestoring, RoleLearner:
			return false
		}
	}
	for _, t := range r.tasks {
		o := owners[t.ID]
		if len(o) != 1 {
			return false
		}
		rt, ok := r.running[t.ID]
		if !ok || rt.member != o[0] || rt.epoch != s.epochs[pair{t.ID, o[0]}] {
			return false
		}
	}
	return true
}

// updateSteadyLocked records a change of steadiness seen by a sample.
// Becoming steady is dated at the last worker start that made it so when
// that falls between the previous sample (or the last change) and this
// one, else at the previous sample.
func (r *Recorder) updateSteadyLocked(s sample) {
	n := len(r.steady)
	if n > 0 && r.steady[n-1].Steady == s.steady {
		return
	}
	at := s.at
	if s.steady {
		at = r.last.at
		if at.IsZero() {
			at = s.at
		}
		if n > 0 {
			at = maxTime(at, r.steady[n-1].At)
		}
		for _, rt := range r.running {
			if rt.since.After(at) && !rt.since.After(s.at) {
				at = rt.since
			}
		}
	}
	r.steady = append(r.steady, SteadyChange{At: at, Steady: s.steady, Generation: s.gen})
}

// unsteadyLocked records that the group stopped being steady at t, because
// a worker stopped or released a task or a member crashed: a move may
// start and end between two samples, but never without one of those.
func (r *Recorder) unsteadyLocked(t time.Time) {
	n := len(r.steady)
	if n == 0 || !r.steady[n-1].Steady {
		return
	}
	r.steady = append(r.steady, SteadyChange{At: maxTime(t, r.steady[n-1].At), Steady: false, Generation: r.last.gen})
}

// Sampled returns a channel closed after the next sample.
func (r *Recorder) Sampled() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sampled
}

// Steady reports whether the group is steady as of the last sample, and
// since when.
func (r *Recorder) Steady() (steady bool, since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.steady)
	if n == 0 {
		return false, time.Time{}
	}
	return r.steady[n-1].Steady, r.steady[n-1].At
}

// Generation is the highest generation a member has applied.
func (r *Recorder) Generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.gens); n > 0 {
		return r.gens[n-1].Generation
	}
	return 0
}

// Committed returns each stateful task's last committed input sequence and
// how many input messages have been committed in all.
func (r *Recorder) Committed() (map[string]uint64, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]uint64, len(r.committed))
	for k, v := range r.committed {
		out[k] = v
	}
	return out, r.committedRecords
}

// FormatPause prints a pause with a precision that fits its size.
func FormatPause(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

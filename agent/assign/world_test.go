package assign

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"pgregory.net/rapid"
)

// world is a randomly generated group that a property test drives through
// random events, planning after each one as the leader would.
type world struct {
	cfg     Config
	now     time.Time
	pool    []Member // every member that may ever be live
	live    map[string]*Member
	lags    map[string]map[string]uint64
	current Assignment
	last    Result
}

var epoch0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func drawConfig(t *rapid.T) Config {
	cfg := DefaultConfig()
	if n := rapid.IntRange(0, 24).Draw(t, "stateful"); n > 0 {
		cfg.Stateful = []string{fmt.Sprintf("s-0..%d", n-1)}
	}
	if n := rapid.IntRange(0, 8).Draw(t, "stateless"); n > 0 {
		cfg.Stateless = []string{fmt.Sprintf("l-0..%d", n-1)}
	}
	cfg.Handover = rapid.SampledFrom([]Mode{Eager, Stable, Cold}).Draw(t, "handover")
	cfg.AcceptableLag = uint64(rapid.IntRange(0, 5).Draw(t, "acceptableLag"))
	cfg.MaxLearners = rapid.IntRange(0, 6).Draw(t, "maxLearners")
	cfg.MaxLearnersPerMember = rapid.IntRange(0, 3).Draw(t, "maxLearnersPerMember")
	cfg.Standbys = rapid.IntRange(0, 2).Draw(t, "standbys")
	return cfg
}

func newWorld(t *rapid.T) *world {
	w := &world{cfg: drawConfig(t), now: epoch0, live: map[string]*Member{}, lags: map[string]map[string]uint64{}}
	n := rapid.IntRange(1, 7).Draw(t, "pool")
	for i := range n {
		w.pool = append(w.pool, Member{
			ID:       fmt.Sprintf("m%d", i),
			Capacity: rapid.IntRange(0, 3).Draw(t, "capacity"),
			Zone:     rapid.SampledFrom([]string{"", "a", "b", "c"}).Draw(t, "zone"),
		})
	}
	for _, m := range w.pool[:rapid.IntRange(0, n).Draw(t, "initial")] {
		w.join(t, m.ID)
	}
	return w
}

func (w *world) taskIDs() []string {
	tasks, _ := w.cfg.Tasks()
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	return ids
}

// join makes a pool member live with local state for a random few tasks.
func (w *world) join(t *rapid.T, id string) {
	for _, m := range w.pool {
		if m.ID != id {
			continue
		}
		m.Positions = map[string]uint64{}
		for _, task := range w.taskIDs() {
			if rapid.IntRange(0, 5).Draw(t, "hasState") == 0 {
				m.Positions[task] = uint64(rapid.IntRange(0, 50).Draw(t, "position"))
			}
		}
		// Its agent may start before its worker: it then joins detached
		// and warms ahead.
		m.Worker = WorkerAttached
		if rapid.Bool().Draw(t, "workerLate") {
			m.Worker = WorkerDetached
		}
		w.live[id] = &m
	}
}

func (w *world) liveIDs(filter func(*Member) bool) []string {
	var ids []string
	for id, m := range w.live {
		if filter == nil || filter(m) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// step applies one random event.
func (w *world) step(t *rapid.T) {
	switch rapid.IntRange(0, 10).Draw(t, "event") {
	case 0: // a member joins or rejoins
		var out []string
		for _, m := range w.pool {
			if w.live[m.ID] == nil {
				out = append(out, m.ID)
			}
		}
		if len(out) > 0 {
			w.join(t, rapid.SampledFrom(out).Draw(t, "joiner"))
		}
	case 1: // a member starts leaving
		if ids := w.liveIDs(func(m *Member) bool { return !m.Leaving }); len(ids) > 0 {
			w.live[rapid.SampledFrom(ids).Draw(t, "leaver")].Leaving = true
		}
	case 2: // a leaving member changes its mind
		if ids := w.liveIDs(func(m *Member) bool { return m.Leaving }); len(ids) > 0 {
			w.live[rapid.SampledFrom(ids).Draw(t, "stayer")].Leaving = false
		}
	case 3: // a member dies
		if ids := w.liveIDs(nil); len(ids) > 0 {
			delete(w.live, rapid.SampledFrom(ids).Draw(t, "dead"))
		}
	case 4, 5: // learners and standbys report progress
		for _, id := range sortedTaskIDs(w.current) {
			ta := w.current.Tasks[id]
			var ms []string
			for _, l := range ta.Learners {
				ms = append(ms, l.Member)
			}
			ms = append(ms, ta.Standbys...)
			for _, m := range ms {
				if rapid.Bool().Draw(t, "reports") {
					setLag(w.lags, id, m, uint64(rapid.IntRange(0, 8).Draw(t, "lag")))
				}
			}
		}
	case 6: // an owner releases a revoked task (sometimes a stale release)
		var revoking []string
		for _, id := range sortedTaskIDs(w.current) {
			if ta := w.current.Tasks[id]; ta.Revoke != nil && w.live[ta.Active] != nil {
				revoking = append(revoking, id)
			}
		}
		if len(revoking) > 0 {
			id := rapid.SampledFrom(revoking).Draw(t, "released")
			ta := w.current.Tasks[id]
			m := w.live[ta.Active]
			if m.Released == nil {
				m.Released = map[string]Release{}
			}
			e := ta.Epoch
			if rapid.IntRange(0, 4).Draw(t, "stale") == 0 {
				e--
			}
			m.Released[id] = Release{Epoch: e, Seq: uint64(rapid.IntRange(1, 1000).Draw(t, "seq")), At: w.now}
		}
	case 7: // time passes
		w.now = w.now.Add(rapid.SampledFrom([]time.Duration{time.Second, 11 * time.Second, time.Minute, 3 * time.Minute, 6 * time.Minute}).Draw(t, "elapse"))
	case 8: // the leader wakes up at the deadline it was given
		if d := w.last.NextDeadline; !d.IsZero() {
			w.now = d
		}
	case 10: // a member's worker detaches, reattaches, or is lost
		ids := w.liveIDs(nil)
		if len(ids) == 0 {
			break
		}
		m := w.live[rapid.SampledFrom(ids).Draw(t, "worker")]
		switch rapid.SampledFrom([]WorkerState{"", WorkerAttached, WorkerDetached, WorkerLost}).Draw(t, "workerState") {
		case WorkerLost:
			// The agent releases every active task on its worker's behalf.
			m.Worker = WorkerLost
			for _, id := range sortedTaskIDs(w.current) {
				if ta := w.current.Tasks[id]; ta.Active == m.ID && rapid.IntRange(0, 4).Draw(t, "releases") > 0 {
					if m.Released == nil {
						m.Released = map[string]Release{}
					}
					m.Released[id] = Release{Epoch: ta.Epoch, Seq: uint64(rapid.IntRange(1, 1000).Draw(t, "seq")), At: w.now}
				}
			}
		case WorkerDetached:
			m.Worker = WorkerDetached
		default:
			m.Worker = WorkerAttached
		}
	case 9: // the group is reconfigured: standbys, handover mode, tasks
		switch rapid.IntRange(0, 2).Draw(t, "reconfigure") {
		case 0:
			w.cfg.Standbys = rapid.IntRange(0, 2).Draw(t, "standbys")
		case 1:
			w.cfg.Handover = rapid.SampledFrom([]Mode{Eager, Stable, Cold}).Draw(t, "handover")
		case 2:
			n := rapid.IntRange(0, 24).Draw(t, "stateful")
			w.cfg.Stateful = nil
			if n > 0 {
				w.cfg.Stateful = []string{fmt.Sprintf("s-0..%d", n-1)}
			}
		}
	}
}

// publish records a plan's result as the members' agents would: each drops
// its release of a task that is no longer being revoked from it.
func (w *world) publish(res Result) {
	w.current, w.last = res.Assignment, res
	for id, m := range w.live {
		pruneReleases(m, id, res.Assignment)
	}
}

// pruneReleases drops m's releases of tasks that are not active and being
// revoked on it (what agent does when a generation arrives).
func pruneReleases(m *Member, id string, a Assignment) {
	for task := range m.Released {
		if t := a.Tasks[task]; t == nil || t.Active != id || t.Revoke == nil {
			delete(m.Released, task)
		}
	}
}

// input is what the leader would hand the assignor now. Lags are only
// those of current learners and standbys, as progress reports would be.
func (w *world) input() Input {
	in := Input{Config: w.cfg, Now: w.now, Current: w.current, Lags: map[string]map[string]uint64{}}
	for _, id := range w.liveIDs(nil) {
		m := *w.live[id]
		m.Positions = maps.Clone(m.Positions)
		m.Released = maps.Clone(m.Released)
		in.Members = append(in.Members, m)
	}
	for id, ta := range w.current.Tasks {
		for m, l := range w.lags[id] {
			if ta.hasLearner(m) || slices.Contains(ta.Standbys, m) {
				setLag(in.Lags, id, m, l)
			}
		}
	}
	return in
}

func (t *TaskAssignment) hasLearner(m string) bool {
	for _, l := range t.Learners {
		if l.Member == m {
			return true
		}
	}
	return false
}

func sortedTaskIDs(a Assignment) []string {
	ids := make([]string, 0, len(a.Tasks))
	for id := range a.Tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

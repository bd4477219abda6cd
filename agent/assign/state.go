package assign

import (
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// view is what one plan reads: its Input, indexed. Nothing in a view
// changes while the plan runs.
type view struct {
	in  *Input
	cfg Config
	now time.Time
	// tasks are the configured tasks sorted by ID; a task is addressed by
	// its index in them.
	tasks     []Task
	taskIndex map[string]int
	// current is each task's published placement (nil if none), lags its
	// Input.Lags entry.
	current []*TaskAssignment
	lags    []map[string]uint64
	// members are the live members sorted by ID; eligible those that are
	// not leaving (they may hold learners and standbys), attached those of
	// them whose worker is attached (they may get new active tasks).
	members  []*member
	byID     map[string]*member
	eligible []*member
	attached []*member
	// zones counts the zones of the live members (Member.Zone, "" being
	// one); member.zone indexes them.
	zones     int
	positions positions
}

// member is one live member as a plan sees it.
type member struct {
	id     string
	rec    *Member
	index  int // in view.members
	zone   int
	weight uint64
	// leaving: it announced its shutdown. eligible: it is not leaving.
	// attached: eligible and its worker is attached. lost: its worker is
	// lost, so its active tasks move away.
	leaving, eligible, attached, lost bool
}

// planner is one plan: the view it reads and the state it builds.
type planner struct {
	view
	// next is each task's placement being built; never nil.
	next []*TaskAssignment
	task []taskPlan
	// leaving is the next Assignment.Leaving, round the next stable round
	// (nil in eager mode or when none is in flight).
	leaving map[string]time.Time
	round   *Round
	moves   []Move
	// learnersOn counts, by member index, the learners still catching up
	// once admitLearners has run; learnerTotal is their sum. Standbys
	// being built come on top of them.
	learnersOn   []int
	learnerTotal int
	// direct: revokes ask for direct hand-offs (directHandoffs).
	direct bool
}

// taskPlan is what a plan decides about one task besides its placement.
type taskPlan struct {
	// dest is the member balance sends the task to (nil if none may own
	// it), warmDest the one it would send it to were every detached
	// worker attached (nil when no member is detached).
	dest, warmDest *member
	// demoted is the owner the task was promoted away from in this plan:
	// it still holds the task's state.
	demoted *member
	// newOwner: the task got a new owner in this plan (failover,
	// assignment, promotion, re-grant) and stays with it, so that no task
	// is activated and revoked in one generation.
	newOwner bool
	// newLearner: its learner was added in this plan and cannot be
	// promoted before it has appeared in a published generation.
	newLearner bool
}

func newPlanner(in *Input) (*planner, bool) {
	tasks, err := in.Config.Tasks()
	if err != nil {
		return nil, false
	}
	p := &planner{view: view{in: in, cfg: in.Config, now: in.Now, tasks: tasks}}
	if p.cfg.Handover == Stable && in.Current.Round != nil {
		r := *in.Current.Round
		r.Tasks = slices.Clone(r.Tasks)
		slices.Sort(r.Tasks)
		p.round = &r
	}
	p.taskIndex = make(map[string]int, len(tasks))
	p.current = make([]*TaskAssignment, len(tasks))
	p.lags = make([]map[string]uint64, len(tasks))
	for i, t := range tasks {
		p.taskIndex[t.ID] = i
		p.current[i] = in.Current.Tasks[t.ID]
		p.lags[i] = in.Lags[t.ID]
	}
	p.indexMembers()
	p.next = copyTasks(p.current)
	p.task = make([]taskPlan, len(tasks))
	p.learnersOn = make([]int, len(p.members))
	p.positions = indexPositions(&p.view)
	p.direct = p.directHandoffs()
	return p, true
}

// indexMembers builds the view's members: the first of each ID, empty IDs
// left out, sorted by ID.
func (v *view) indexMembers() {
	all := make([]member, 0, len(v.in.Members))
	var zones []string
	for i := range v.in.Members {
		rec := &v.in.Members[i]
		if rec.ID == "" {
			continue
		}
		all = append(all, member{id: rec.ID, rec: rec, weight: weight(rec.Capacity), leaving: rec.Leaving, lost: rec.Worker == WorkerLost})
		zones = append(zones, rec.Zone)
	}
	slices.Sort(zones)
	zones = slices.Compact(zones)
	v.zones = len(zones)
	sort.SliceStable(all, func(i, j int) bool { return all[i].id < all[j].id })
	v.byID = make(map[string]*member, len(all))
	for i := range all {
		m := &all[i]
		if _, dup := v.byID[m.id]; dup {
			continue
		}
		m.index = len(v.members)
		m.zone, _ = slices.BinarySearch(zones, m.rec.Zone)
		v.byID[m.id] = m
		v.members = append(v.members, m)
		if m.leaving {
			continue
		}
		m.eligible = true
		v.eligible = append(v.eligible, m)
		if w := m.rec.Worker; w == "" || w == WorkerAttached {
			m.attached = true
			v.attached = append(v.attached, m)
		}
	}
}

// copyTasks deep-copies src (nil entries become zero placements) with a
// handful of allocations: the copies share backing arrays whose slices are
// capped at their length, so appending to one never touches another.
func copyTasks(src []*TaskAssignment) []*TaskAssignment {
	nl, ns, nr, nm := 0, 0, 0, 0
	for _, t := range src {
		if t != nil {
			nl += len(t.Learners)
			ns += len(t.Standbys)
			if t.Revoke != nil {
				nr++
			}
			if t.StandbyMove != nil {
				nm++
			}
		}
	}
	slab := make([]TaskAssignment, len(src))
	learners := make([]Learner, 0, nl)
	standbys := make([]string, 0, ns)
	revokes := make([]Revoke, 0, nr)
	standbyMoves := make([]StandbyMove, 0, nm)
	out := make([]*TaskAssignment, len(src))
	for i, t := range src {
		d := &slab[i]
		out[i] = d
		if t == nil {
			continue
		}
		*d = *t
		if t.Revoke != nil {
			revokes = append(revokes, *t.Revoke)
			d.Revoke = &revokes[len(revokes)-1]
		}
		if t.StandbyMove != nil {
			standbyMoves = append(standbyMoves, *t.StandbyMove)
			d.StandbyMove = &standbyMoves[len(standbyMoves)-1]
		}
		if len(t.Learners) > 0 {
			at := len(learners)
			learners = append(learners, t.Learners...)
			d.Learners = learners[at:len(learners):len(learners)]
			if !slices.IsSortedFunc(d.Learners, compareLearners) {
				slices.SortFunc(d.Learners, compareLearners)
			}
		} else {
			d.Learners = nil
		}
		if len(t.Standbys) > 0 {
			at := len(standbys)
			standbys = append(standbys, t.Standbys...)
			d.Standbys = standbys[at:len(standbys):len(standbys)]
			if !slices.IsSorted(d.Standbys) {
				slices.Sort(d.Standbys)
			}
		} else {
			d.Standbys = nil
		}
	}
	return out
}

func compareLearners(a, b Learner) int { return strings.Compare(a.Member, b.Member) }

// move records a change to task i.
func (p *planner) move(i int, k MoveKind, from, to, reason string) {
	p.moves = append(p.moves, Move{Task: p.tasks[i].ID, Kind: k, From: from, To: to, Reason: reason})
}

// lag is what member m reported it still has to apply of task i; unknown
// lags are the largest.
func (v *view) lag(i int, m string) uint64 {
	if l, ok := v.lags[i][m]; ok {
		return l
	}
	return math.MaxUint64
}

// caughtUp reports whether m's copy of task i is within the acceptable lag.
func (v *view) caughtUp(i int, m string) bool {
	l, ok := v.lags[i][m]
	return ok && l <= v.cfg.AcceptableLag
}

// position is how far m's local copy of task i reaches; 0 if it has none.
func (v *view) position(i int, m *member) uint64 {
	return m.rec.Positions[v.tasks[i].ID]
}

// released returns owner's release of task i if it answers revoke rv at
// the task's current epoch.
func (p *planner) released(owner *member, i int, rv *Revoke) (Release, bool) {
	r, ok := owner.rec.Released[p.tasks[i].ID]
	return r, ok && r.answers(rv, p.next[i].Epoch)
}

// leaveDeadline is when a leaving member's remaining tasks are forced out.
func (p *planner) leaveDeadline(m *member) time.Time {
	return p.leaving[m.id].Add(p.cfg.LeaveTimeout.D())
}

// orphan reports whether nobody serves task i: no owner, a dead owner, or
// one whose worker is lost.
func (p *planner) orphan(i int) bool {
	m := p.byID[p.next[i].Active]
	return m == nil || m.lost
}

// moving reports whether task i is on its way to another member.
func (p *planner) moving(i int) bool {
	t, d := p.next[i], p.task[i].dest
	return t.Revoke != nil || d != nil && d.id != t.Active
}

// hasStandby reports whether m is a standby of task i.
func (p *planner) hasStandby(i int, m string) bool {
	return slices.Contains(p.next[i].Standbys, m)
}

// learnerOn reports whether m is a learner of task i.
func (p *planner) learnerOn(i int, m string) bool {
	for _, l := range p.next[i].Learners {
		if l.Member == m {
			return true
		}
	}
	return false
}

// removeMember deletes m from task i's learners and standbys without
// recording a move: the caller's move (a promotion, a failover) explains it.
func (p *planner) removeMember(i int, m string) {
	t := p.next[i]
	t.Learners = nilIfEmpty(slices.DeleteFunc(t.Learners, func(l Learner) bool { return l.Member == m }))
	t.Standbys = nilIfEmpty(slices.DeleteFunc(t.Standbys, func(s string) bool { return s == m }))
}

func nilIfEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

// span counts the zones of task t's copies (its owner and standbys) on
// live members, with skip's copy left out and add's added (each may be
// nil); 0 for no task.
func (p *planner) span(t *TaskAssignment, skip, add *member) int {
	if t == nil {
		return 0
	}
	var buf [8]int
	zones := buf[:0]
	for j := -1; j <= len(t.Standbys); j++ {
		m := add
		if j < 0 {
			m = p.byID[t.Active]
		} else if j < len(t.Standbys) {
			m = p.byID[t.Standbys[j]]
		}
		if m != nil && m != skip && !slices.Contains(zones, m.zone) {
			zones = append(zones, m.zone)
		}
	}
	return len(zones)
}

// othersCaughtUp reports whether task i's standbys but except have caught up.
func (p *planner) othersCaughtUp(i int, except string) bool {
	return !slices.ContainsFunc(p.next[i].Standbys, func(s string) bool { return s != except && !p.caughtUp(i, s) })
}

func (p *planner) addStandby(i int, m *member, reason string) {
	t := p.next[i]
	t.Standbys = append(t.Standbys, m.id)
	slices.Sort(t.Standbys)
	p.move(i, MoveStandbyAdd, t.Active, m.id, reason)
}

func (p *planner) dropStandby(i int, id, reason string) {
	t := p.next[i]
	t.Standbys = nilIfEmpty(slices.DeleteFunc(t.Standbys, func(s string) bool { return s == id }))
	p.move(i, MoveStandbyDrop, t.Active, id, reason)
}

// target is r's revoke target, "" for none.
func (r *Revoke) target() string {
	if r == nil {
		return ""
	}
	return r.Target
}

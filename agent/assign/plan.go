package assign

import (
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Plan returns the assignment the leader publishes next, and why.
//
// Plan is pure and deterministic: it reads nothing but in (no clock but
// in.Now), does not modify in, and its Result shares no memory with in. The
// order of in.Members and of map iteration does not matter.
//
// One call makes every change that needs no acknowledgement from a member,
// in this order:
//
//   - trackLeaving, adoptHandoffs, cleanup: record leaving members;
//     record the direct hand-offs members report; drop roles on members
//     that can no longer hold them; withdraw revokes whose target died,
//     is leaving or has no worker attached;
//   - unassignAll, when no member may own a task (all leaving, or no
//     worker attached);
//   - promote: complete released or timed-out revokes;
//   - balance: the destination of every task, balancing stateful,
//     stateless and all actives at once over the members whose worker is
//     attached, orphans (dead owner, lost worker, no owner) included;
//   - warmAhead: when a member's worker is detached, the destinations
//     balance would give were it attached;
//   - placeOrphans: give orphans their destination at once (failover);
//   - reconcile: learners towards destinations, and on detached members
//     towards the tasks bound for them (within Config.MaxLearners and
//     MaxLearnersPerMember), revokes of tasks whose learner or standby
//     has caught up (per Config.Handover), stateless moves;
//   - placeStandbys: standbys filled, balanced with the actives, moved warm.
//
// A task that gets a new owner in a plan is not revoked in it. Each change
// is listed in Result.Moves.
//
// Plan expects in.Config to pass Config.Validate (Input.Validate checks the
// whole input). If the config's task specs do not expand, it returns the
// current assignment unchanged. Members with an empty ID are ignored; of two
// members with the same ID the first one in in.Members counts.
func Plan(in Input) Result {
	p, ok := newPlanner(&in)
	if !ok {
		return Result{Assignment: in.Current.Clone()}
	}
	p.trackLeaving()
	p.adoptHandoffs()
	p.cleanup()
	if len(p.actives) == 0 {
		p.unassignAll()
	}
	p.promote()
	if len(p.actives) > 0 {
		p.balance()
		p.warmAhead()
		p.placeOrphans()
		p.reconcile()
	}
	p.placeStandbys()
	return p.finish()
}

// planner is the state of one Plan call. Tasks are addressed by their index
// in tasks (sorted by ID), members through byID.
type planner struct {
	in    *Input
	cfg   Config
	now   time.Time
	tasks []Task
	// byTask maps a task ID to its index in tasks.
	byTask map[string]int
	// cur is each task's current placement (nil if none); read only.
	cur []*TaskAssignment
	// next is each task's placement being built; never nil.
	next []*TaskAssignment
	// members are the live members sorted by ID; eligible those that are
	// not leaving (they may hold learners and standbys), and actives those
	// of them whose worker is attached (they may get new active tasks), in
	// the same order.
	members  []*member
	eligible []*member
	actives  []*member
	byID     map[string]*member
	// leaving is the next Assignment.Leaving.
	leaving map[string]time.Time
	// round is the next stable round; nil in eager mode.
	round *Round
	// dest is each task's balanced destination (set by balance).
	dest []*member
	// warmDest is each task's destination were every detached member's
	// worker attached (set by warmAhead; nil when no member is detached);
	// held is, while warmAhead runs, the destination balance chose for
	// each task it moves, which the hypothetical balance keeps.
	warmDest, held []*member
	// demoted is the owner each task was promoted away from in this plan:
	// it still holds the task's state, so it is a warm standby candidate.
	demoted []*member
	// learnerBorn marks tasks whose learner was added in this plan: it
	// cannot be promoted before it has appeared in a published generation.
	learnerBorn []bool
	// fixed marks tasks that got a new owner in this plan (failover,
	// assignment, promotion, re-grant): the plan keeps them there, so that
	// no task is activated and revoked in one generation.
	fixed []bool
	// movingOut marks tasks whose move to a learner is under way and can
	// finish (see markMoving).
	movingOut []bool
	// isOrphan marks the tasks nobody serves (no owner, a dead owner, or
	// an owner whose worker is lost); isPinned those that stay with their
	// owner whatever the balance (its worker is detached: it keeps the
	// actives it has, but its share is not counted) and are not being
	// revoked. Both are settled when balance starts.
	isOrphan, isPinned []bool
	// need is how many standbys each stateful task can have (set by
	// placeStandbys).
	need []int
	// holder is the member each stateful task is planned to end on, for
	// the standby quotas (set by placeStandbys).
	holder []*member
	// lags is Input.Lags by task index (see lagsOf).
	lags  []map[string]uint64
	pos   positions
	moves []Move
	// direct: revokes ask for direct hand-offs (directHandoffs).
	direct bool
	// learnerTotal counts the learners catching up once admitLearners
	// ran; standbys being built come on top of it.
	learnerTotal int
}

// member is a live member as one plan sees it.
type member struct {
	id       string
	rec      *Member
	weight   uint64
	zone     string
	leaving  bool
	eligible bool
	// attached: eligible and its worker is attached, so it may get new
	// active tasks. lost: its worker is lost; its actives move away.
	attached bool
	lost     bool
	// aidx is the member's index in planner.actives, or -1.
	aidx int
	// owned counts the tasks of each kind the member is active for.
	owned [2]int
	// load counts the tasks of each kind planned to end on the member (it
	// owns them and no move away is planned, or it is their learner or
	// revoke target).
	load  [2]int
	quota [2]int
	// room is what balance may still give the member.
	room   [2]int
	heapAt [2]int
	// under: the member holds fewer tasks of the kind balance is placing
	// than its quota, counting moves under way (see balanceKind).
	under  bool
	zoneAt int
	// learners and standbys count the member's learner and standby entries.
	learners int
	standbys int
	// squota is how many standbys the member should hold (see
	// standbyQuotas); building counts the standbys being built on it.
	squota   int
	building int
	settled  int // standbys that are not copies being built for a move
}

func newPlanner(in *Input) (*planner, bool) {
	tasks, err := in.Config.Tasks()
	if err != nil {
		return nil, false
	}
	p := &planner{in: in, cfg: in.Config, now: in.Now, tasks: tasks}
	if p.cfg.Handover == Stable && in.Current.Round != nil {
		r := *in.Current.Round
		r.Tasks = slices.Clone(r.Tasks)
		slices.Sort(r.Tasks)
		p.round = &r
	}
	p.byTask = make(map[string]int, len(tasks))
	for i, t := range tasks {
		p.byTask[t.ID] = i
	}

	all := make([]member, 0, len(in.Members))
	for i := range in.Members {
		rec := &in.Members[i]
		if rec.ID == "" {
			continue
		}
		all = append(all, member{id: rec.ID, rec: rec, weight: weight(rec.Capacity), zone: rec.Zone, leaving: rec.Leaving,
			lost: rec.Worker == WorkerLost, aidx: -1})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].id < all[j].id })
	p.byID = make(map[string]*member, len(all))
	for i := range all {
		m := &all[i]
		if _, dup := p.byID[m.id]; dup {
			continue
		}
		p.byID[m.id] = m
		p.members = append(p.members, m)
		if !m.leaving {
			m.eligible = true
			p.eligible = append(p.eligible, m)
			if w := m.rec.Worker; w == "" || w == WorkerAttached {
				m.attached = true
				m.aidx = len(p.actives)
				p.actives = append(p.actives, m)
			}
		}
	}

	n := len(tasks)
	p.cur = make([]*TaskAssignment, n)
	for i, t := range tasks {
		p.cur[i] = in.Current.Tasks[t.ID]
	}
	p.next = copyTasks(p.cur)
	p.dest = make([]*member, n)
	p.demoted = make([]*member, n)
	p.learnerBorn = make([]bool, n)
	p.fixed = make([]bool, n)
	p.pos = indexPositions(p)
	p.direct = p.directHandoffs()
	return p, true
}

// copyTasks deep-copies src (nil entries become zero placements) with a
// handful of allocations: the copies share backing arrays whose slices are
// capped at their length, so appending to one never touches another.
func copyTasks(src []*TaskAssignment) []*TaskAssignment {
	nl, ns, nr := 0, 0, 0
	for _, t := range src {
		if t != nil {
			nl += len(t.Learners)
			ns += len(t.Standbys)
			if t.Revoke != nil {
				nr++
			}
		}
	}
	slab := make([]TaskAssignment, len(src))
	learners := make([]Learner, 0, nl)
	standbys := make([]string, 0, ns)
	revokes := make([]Revoke, 0, nr)
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
func (p *planner) lag(i int, m string) uint64 {
	if l, ok := p.lagsOf(i)[m]; ok {
		return l
	}
	return math.MaxUint64
}

// caughtUp reports whether m's copy of task i is within the acceptable lag.
func (p *planner) caughtUp(i int, m string) bool {
	l, ok := p.lagsOf(i)[m]
	return ok && l <= p.cfg.AcceptableLag
}

// lagsOf is Input.Lags of task i, looked up once per plan.
func (p *planner) lagsOf(i int) map[string]uint64 {
	if p.lags == nil {
		p.lags = make([]map[string]uint64, len(p.tasks))
		for j, t := range p.tasks {
			p.lags[j] = p.in.Lags[t.ID]
		}
	}
	return p.lags[i]
}

// released returns owner's release of task i if it answers revoke rv at
// the task's current epoch.
func (p *planner) released(owner *member, i int, rv *Revoke) (Release, bool) {
	r, ok := owner.rec.Released[p.tasks[i].ID]
	return r, ok && r.answers(rv, p.next[i].Epoch)
}

// position is how far m's local copy of task i reaches; 0 if it has none.
func (p *planner) position(i int, m *member) uint64 {
	return m.rec.Positions[p.tasks[i].ID]
}

// leaveDeadline is when a leaving member's remaining tasks are forced out.
func (p *planner) leaveDeadline(m *member) time.Time {
	return p.leaving[m.id].Add(p.cfg.LeaveTimeout.D())
}

// plannedOwner is the active-capable member task i is expected to end on:
// its revoke target, else its learner, else its owner; nil if none of them
// may own it.
func (p *planner) plannedOwner(i int) *member {
	t := p.next[i]
	if t.Active == "" {
		return nil
	}
	if t.Revoke != nil {
		if m := p.byID[t.Revoke.Target]; m != nil && m.attached {
			return m
		}
	}
	for _, l := range t.Learners {
		if m := p.byID[l.Member]; m != nil && m.attached && m.id != t.Active {
			return m
		}
	}
	if m := p.byID[t.Active]; m != nil && m.attached {
		return m
	}
	return nil
}

// balanced counts the tasks of each kind that the balance distributes over
// the active-capable members: all but those pinned to a detached owner.
func (p *planner) balanced() [2]int {
	var total [2]int
	for i := range p.tasks {
		if !p.isPinned[i] {
			total[kindOf(p.tasks[i].Stateful)]++
		}
	}
	return total
}

// countOwned sets each active-capable member's owned counts.
func (p *planner) countOwned() {
	for _, m := range p.actives {
		m.owned = [2]int{}
	}
	for i, t := range p.next {
		if m := p.byID[t.Active]; m != nil && m.attached {
			m.owned[kindOf(p.tasks[i].Stateful)]++
		}
	}
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
	t.Learners = slices.DeleteFunc(t.Learners, func(l Learner) bool { return l.Member == m })
	t.Standbys = slices.DeleteFunc(t.Standbys, func(s string) bool { return s == m })
	if len(t.Learners) == 0 {
		t.Learners = nil
	}
	if len(t.Standbys) == 0 {
		t.Standbys = nil
	}
}

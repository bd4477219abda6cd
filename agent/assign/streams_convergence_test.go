package assign

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// This file ports Kafka Streams' assignor convergence suite
// (TaskAssignorConvergenceTest in apache/kafka, streams/src/test/.../
// processor/internals/assignment): a harness that replays cluster
// perturbations against the assignor, with warm copies catching up at once
// between rounds as that harness does, and checks after each event that
// the group converged within Kafka's bound of rounds, that the assignment
// is valid, and that it passes Kafka's balance checks and ours.
//
// The random perturbations run with members in 1, 2 and 3 zones
// (round-robin by ID). Zones win over the balance of stateful actives plus
// standbys (docs/plan.md), so with more than one zone that balance is
// checked within each zone instead of over the group, and every converged
// task's copies span as many zones as the group gives them; no plan may
// cost a task a zone while the dropped copy's member is live.
//
// A round is a plan that changes the assignment (a generation): Kafka's
// iteration count includes the iteration that finds nothing pending, and
// our last changing plan is that iteration's counterpart. Kafka's
// per-subtopology skew check has no counterpart: handoff task IDs carry no
// subtopology, and the per-kind checks play its part.

var (
	convergenceSeeds = flag.Int("convergence.seeds", 300, "random seeds of the convergence suite (each runs in eager and stable mode, in 1, 2 and 3 zones)")
	convergenceZones = flag.String("convergence.zones", "1,2,3", "zone counts of the convergence suite's random perturbations")
)

// streamsHarness is a group driven by cluster events.
type streamsHarness struct {
	t                   *testing.T
	cfg                 Config
	stateful, stateless int
	zones               int // members are in zones z0.., round-robin by ID
	now                 time.Time
	live                []Member          // sorted by ID
	dropped             map[string]Member // members that left, with the state they had
	nextID              int
	current             Assignment
	history             strings.Builder
	// check runs checkPlan on every plan (slow).
	check bool
	// stats
	rounds, moves, fewest, twice int
	// standbyMoves counts standbys added for balance; standbyBack the
	// standbys added back to a member they were dropped from in one
	// convergence (a flap), standbyAgain those dropped from a member they
	// were added to in it (a copy placed twice).
	standbyMoves, standbyBack, standbyAgain int
}

func newStreamsHarness(t *testing.T, mode Mode, zones, stateless, stateful, nodes, maxLearners, standbys int) *streamsHarness {
	cfg := DefaultConfig()
	cfg.Handover = mode
	cfg.AcceptableLag = 100
	cfg.MaxLearners = maxLearners
	cfg.MaxLearnersPerMember = 0
	cfg.Standbys = standbys
	if stateful > 0 {
		cfg.Stateful = []string{fmt.Sprintf("s-0..%d", stateful-1)}
	}
	if stateless > 0 {
		cfg.Stateless = []string{fmt.Sprintf("l-0..%d", stateless-1)}
	}
	h := &streamsHarness{t: t, cfg: cfg, stateful: stateful, stateless: stateless, zones: zones, now: t0, dropped: map[string]Member{}}
	fmt.Fprintf(&h.history, "%s, %d zones: %d stateless, %d stateful, %d nodes, max learners %d, standbys %d\n", mode, zones, stateless, stateful, nodes, maxLearners, standbys)
	for range nodes {
		h.addNode()
	}
	return h
}

func (h *streamsHarness) addNode() {
	id := fmt.Sprintf("m%02d", h.nextID)
	zone := fmt.Sprintf("z%d", h.nextID%h.zones)
	h.nextID++
	fmt.Fprintf(&h.history, "add %s in %s\n", id, zone)
	h.live = append(h.live, Member{ID: id, Zone: zone})
}

func (h *streamsHarness) dropNode(i int) {
	m := h.live[i]
	fmt.Fprintf(&h.history, "drop %s\n", m.ID)
	h.dropped[m.ID] = m
	h.live = slices.Delete(h.live, i, i+1)
}

func (h *streamsHarness) resurrect(id string) {
	fmt.Fprintf(&h.history, "resurrect %s\n", id)
	h.live = append(h.live, h.dropped[id])
	delete(h.dropped, id)
	slices.SortFunc(h.live, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
}

func (h *streamsHarness) dropRandomNodes(n int, rng *rand.Rand) {
	for d := 0; d < n && len(h.live) > 0; d++ {
		h.dropNode(rng.IntN(len(h.live)))
	}
}

func (h *streamsHarness) addOrResurrectRandomly(rng *rand.Rand, limit int) {
	for range rng.IntN(limit) {
		if rng.IntN(2) == 0 || len(h.dropped) == 0 {
			h.addNode()
			continue
		}
		ids := make([]string, 0, len(h.dropped))
		for id := range h.dropped {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		h.resurrect(ids[rng.IntN(len(ids))])
	}
}

// converge plans until nothing changes, as the leader would with every
// learner and standby caught up and every revoke released at once; it
// fails if that takes more than limit rounds. Members report local state
// for the tasks they own or stand by for, as Kafka's harness carries
// offsets over.
func (h *streamsHarness) converge(limit int) {
	h.t.Helper()
	owned := map[string][2]int{}
	var total [2]int
	tasks, _ := h.cfg.Tasks()
	liveIDs := map[string]bool{}
	for _, m := range h.live {
		liveIDs[m.ID] = true
	}
	for _, task := range tasks {
		k := kindOf(task.Stateful)
		total[k]++
		if ta := h.current.Tasks[task.ID]; ta != nil && liveIDs[ta.Active] {
			c := owned[ta.Active]
			c[k]++
			owned[ta.Active] = c
		}
	}
	before := h.current
	moved := map[string]int{}
	failovers := 0
	type copyOn struct{ task, member string }
	added, dropped := map[copyOn]bool{}, map[copyOn]bool{}
	in := Input{Config: h.cfg, Now: h.now, Members: cloneMembers(h.live), Current: h.current}
	rounds := 0
	for {
		in.Lags = caughtUpLags(in.Current)
		releaseAll(in.Members, in.Current, in.Now)
		res := Plan(in)
		if h.check {
			checkPlan(h.t, in, res)
		}
		if losses, misplaced, _ := checkZoneMoves(in, res); len(losses)+len(misplaced) > 0 {
			h.t.Fatalf("zones: %v\n%s\nplan: %q", append(losses, misplaced...), h.history.String(), moveLines(res.Moves))
		}
		if !res.Changed {
			break
		}
		rounds++
		for _, m := range res.Moves {
			if m.Kind == MovePromote || m.Kind == MoveFailover {
				moved[m.Task]++
			}
			if m.Kind == MoveFailover {
				failovers++
			}
			c := copyOn{m.Task, m.To}
			switch m.Kind {
			case MoveStandbyAdd:
				if m.Reason == reasonBalance {
					h.standbyMoves++
				}
				if dropped[c] {
					h.standbyBack++
				}
				added[c] = true
			case MoveStandbyDrop:
				if added[c] {
					h.standbyAgain++
				}
				dropped[c] = true
			}
		}
		if rounds > limit {
			h.t.Fatalf("no convergence within %d rounds\n%s\nlast plan: %q", limit, h.history.String(), moveLines(res.Moves))
		}
		in.Current = res.Assignment
		in.Now = in.Now.Add(time.Second)
		for i := range in.Members {
			pruneReleases(&in.Members[i], in.Members[i].ID, in.Current)
		}
	}
	h.now = in.Now
	h.current = in.Current
	// Carry local state over: what each member owns or stands by for.
	for i := range h.live {
		m := &h.live[i]
		m.Released = nil
		m.Positions = map[string]uint64{}
		for id, ta := range h.current.Tasks {
			if ta.Active == m.ID || slices.Contains(ta.Standbys, m.ID) {
				if strings.HasPrefix(id, "s-") {
					m.Positions[id] = 150000
				}
			}
		}
	}
	// Re-planned as the next event would see it, with the local state the
	// members now report and in reverse order, the group stays put.
	again := Input{Config: h.cfg, Now: h.now.Add(time.Second), Members: cloneMembers(h.live), Current: h.current, Lags: caughtUpLags(h.current)}
	slices.Reverse(again.Members)
	if res := Plan(again); res.Changed {
		h.t.Fatalf("converged, yet re-planned: %q\n%s", moveLines(res.Moves), h.history.String())
	}
	n := 0
	for _, task := range tasks {
		if b := before.Tasks[task.ID]; b != nil && b.Active != "" && h.current.Tasks[task.ID].Active != b.Active {
			n++
		}
	}
	for _, c := range moved {
		if c > 1 {
			h.twice++
		}
	}
	fewest := minMoves(h.live, owned, total)
	if before.Tasks == nil {
		fewest, n = 0, 0 // the first assignment places, it moves nothing
	}
	fmt.Fprintf(&h.history, "converged in %d rounds (bound %d), %d owners changed, fewest %d\n", rounds, limit, n, fewest)
	h.rounds = max(h.rounds, rounds)
	h.moves += n
	h.fewest += fewest
	// The slack: a failover to a warm member already at its quota makes
	// that member shed one more task, warm, later (see pickOrphanOwner).
	if n > fewest+failovers {
		h.t.Fatalf("%d owners changed, the fewest is %d, and only %d failed over\n%s", n, fewest, failovers, h.history.String())
	}
}

// verify checks the converged assignment: Kafka's validity and balance
// checks, then ours, each axis capacity-weighted.
func (h *streamsHarness) verify() {
	h.t.Helper()
	fail := func(format string, args ...any) {
		h.t.Helper()
		h.t.Fatalf(format+"\n%s\n%s", append(args, h.history.String(), js(h.current))...)
	}
	tasks, _ := h.cfg.Tasks()
	live := map[string]bool{}
	for _, m := range h.live {
		live[m.ID] = true
	}
	type load struct{ stateful, stateless, standby int }
	loads := map[string]*load{}
	for _, m := range h.live {
		loads[m.ID] = &load{}
	}
	// Valid: each task has one active on a live member, each stateful one
	// min(standbys, members-1) standbys on other live members, no learner
	// or revoke left, nothing on a stateless task but its active.
	for _, task := range tasks {
		ta := h.current.Tasks[task.ID]
		if ta == nil || !live[ta.Active] {
			fail("%s: not assigned to a live member: %s", task.ID, js(ta))
		}
		if len(ta.Learners) > 0 || ta.Revoke != nil {
			fail("%s: converged, yet %s", task.ID, summary(ta))
		}
		want := 0
		if task.Stateful {
			want = min(h.cfg.Standbys, len(h.live)-1)
			loads[ta.Active].stateful++
		} else {
			loads[ta.Active].stateless++
		}
		if len(ta.Standbys) != want {
			fail("%s: %d standbys, want %d", task.ID, len(ta.Standbys), want)
		}
		for _, s := range ta.Standbys {
			if !live[s] || s == ta.Active {
				fail("%s: standby %s", task.ID, s)
			}
			loads[s].standby++
		}
	}
	// Kafka's checks (capacity 1 everywhere): all actives, and stateful
	// actives plus standbys, differ by at most one between members; the
	// latter within each zone when there are more.
	spread := func(name string, f func(*load) int, zone string) {
		lo, hi := 1<<30, -1
		for _, m := range h.live {
			if zone == "" || m.Zone == zone {
				lo, hi = min(lo, f(loads[m.ID])), max(hi, f(loads[m.ID]))
			}
		}
		if hi-lo > 1 {
			fail("%s: spread %d..%d", name, lo, hi)
		}
	}
	copiesOn := func(l *load) int { return l.stateful + l.standby }
	spread("active tasks (Kafka)", func(l *load) int { return l.stateful + l.stateless }, "")
	zones := eligibleZones(h.live)
	if zones == 1 {
		spread("stateful tasks, active and standby (Kafka)", copiesOn, "")
	} else {
		for z := range h.zones {
			spread(fmt.Sprintf("stateful tasks, active and standby, in zone z%d", z), copiesOn, fmt.Sprintf("z%d", z))
		}
	}
	// Ours, capacity-weighted: each member within one of its share.
	n := len(h.live)
	within := func(name string, total int, f func(*load) int) {
		for id, l := range loads {
			if d := f(l)*n - total; d >= n || -d >= n {
				fail("%s: %s holds %d, share %.2f", name, id, f(l), float64(total)/float64(n))
			}
		}
	}
	copies := h.stateful * (1 + min(h.cfg.Standbys, n-1))
	within("stateful actives", h.stateful, func(l *load) int { return l.stateful })
	within("stateless actives", h.stateless, func(l *load) int { return l.stateless })
	within("all actives", h.stateful+h.stateless, func(l *load) int { return l.stateful + l.stateless })
	if zones == 1 {
		within("stateful actives plus standbys", copies, copiesOn)
	}
	if bad := checkZoneSpan(h.live, h.cfg, h.current); len(bad) > 0 {
		fail("zones: %v", bad)
	}
}

// TestStreamsConvergenceFirstAssignment: a new one-node group converges at
// once.
func TestStreamsConvergenceFirstAssignment(t *testing.T) {
	for _, mode := range []Mode{Eager, Stable} {
		h := newStreamsHarness(t, mode, 1, 1, 1, 1, 2, 0)
		h.converge(1)
		h.verify()
	}
}

// TestStreamsConvergenceAddingNode: a second node joins a one-node group
// of 7 stateless and 11 stateful tasks, 2 learners at a time; Kafka's
// bound is one round per two moves plus one.
func TestStreamsConvergenceAddingNode(t *testing.T) {
	for _, mode := range []Mode{Eager, Stable} {
		const stateless, stateful, learners = 7, 11, 2
		h := newStreamsHarness(t, mode, 1, stateless, stateful, 1, learners, 0)
		h.converge(1)
		h.addNode()
		h.converge(stateful/learners + 1)
		h.verify()
		t.Logf("%s: %d rounds (Kafka's bound %d), %d owners changed, fewest %d", mode, h.rounds, stateful/learners+1, h.moves, h.fewest)
		if h.moves != h.fewest {
			t.Errorf("%s: %d owners changed, fewest %d", mode, h.moves, h.fewest)
		}
	}
}

// TestStreamsConvergenceDroppingNode: the first of seven nodes dies; Kafka
// allows one round more, for a task shuffled back.
func TestStreamsConvergenceDroppingNode(t *testing.T) {
	for _, mode := range []Mode{Eager, Stable} {
		const stateless, stateful, learners = 7, 11, 2
		h := newStreamsHarness(t, mode, 1, stateless, stateful, 7, learners, 0)
		h.converge(1)
		h.dropNode(0)
		h.converge(stateful/learners + 2)
		h.verify()
		t.Logf("%s: %d rounds (Kafka's bound %d), %d owners changed, fewest %d", mode, h.rounds, stateful/learners+2, h.moves, h.fewest)
		if h.moves != h.fewest {
			t.Errorf("%s: %d owners changed, fewest %d\n%s", mode, h.moves, h.fewest, h.history.String())
		}
	}
}

// TestStreamsConvergenceRandom replays random perturbations, as Kafka's
// randomClusterPerturbationsShouldConverge does: 1-10 nodes, 1-10 tasks of
// each kind, 1..stateful learners at a time, 0..nodes standbys, 1-10
// events that drop nodes or add (or resurrect) them. After each event the
// group converges within 2 × (stateful + stateful × standbys) rounds and
// passes every check. Seeds 1..-convergence.seeds, in both modes.
func TestStreamsConvergenceRandom(t *testing.T) {
	for _, zs := range strings.Split(*convergenceZones, ",") {
		zones, err := strconv.Atoi(zs)
		if err != nil || zones < 1 {
			t.Fatalf("-convergence.zones=%s: want zone counts such as 1,2,3", *convergenceZones)
		}
		var rounds, moves, fewest, twice, events, extra, worst, standbyMoves, back, again int
		for _, mode := range []Mode{Eager, Stable} {
			for seed := 1; seed <= *convergenceSeeds; seed++ {
				t.Run(fmt.Sprintf("zones=%d/%s/seed=%d", zones, mode, seed), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(seed), 0))
					size := rng.IntN(10) + 1
					stateless := rng.IntN(10) + 1
					stateful := rng.IntN(10) + 1
					learners := rng.IntN(stateful) + 1
					standbys := rng.IntN(size + 1)
					h := newStreamsHarness(t, mode, zones, stateless, stateful, size, learners, standbys)
					h.check = seed <= 20
					fmt.Fprintf(&h.history, "seed %d\n", seed)
					h.converge(1)
					h.verify()
					for range rng.IntN(10) + 1 {
						if rng.IntN(2) == 0 {
							h.dropRandomNodes(rng.IntN(size), rng)
						} else {
							h.addOrResurrectRandomly(rng, size)
						}
						if len(h.live) == 0 {
							continue
						}
						m, f := h.moves, h.fewest
						h.converge(2 * (stateful + stateful*standbys))
						h.verify()
						events++
						if d := (h.moves - m) - (h.fewest - f); d > 0 {
							extra++
							worst = max(worst, d)
						}
					}
					rounds = max(rounds, h.rounds)
					moves += h.moves
					fewest += h.fewest
					twice += h.twice
					standbyMoves += h.standbyMoves
					back += h.standbyBack
					again += h.standbyAgain
				})
			}
		}
		t.Logf("%d zones, %d seeds × 2 modes, %d events: most rounds after an event %d; %d owners changed, fewest possible %d (%.2f%% more); %d events moved more than the fewest (at most %d more); %d times a task changed owner twice in one convergence; %d standbys moved for balance, %d added back where they had been dropped, %d dropped where they had been added, in one convergence",
			zones, *convergenceSeeds, events, rounds, moves, fewest, 100*float64(moves-fewest)/float64(max(fewest, 1)), extra, worst, twice, standbyMoves, back, again)
	}
}

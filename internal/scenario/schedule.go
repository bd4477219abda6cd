package scenario

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// FaultKind names one kind of fault of a chaos schedule.
type FaultKind string

// The faults a chaos schedule injects. Each carries its own recovery (a
// restart, SIGCONT) after its Delay, so at most one member is down at a
// time; what overlaps is the group's reaction to one fault with the next.
const (
	// FaultKillMember SIGKILLs a member's agent and worker, as a lost
	// machine, and restarts both with the same data dir after Delay:
	// before the session timeout the same member comes back while its
	// record still lives, after it its tasks have failed over.
	FaultKillMember FaultKind = "kill-member"
	// FaultKillAgent SIGKILLs the agent only. Its worker runs on against
	// an agent that is gone; after Delay the worker is killed too and both
	// restart (the new agent serves on a new port).
	FaultKillAgent FaultKind = "kill-agent"
	// FaultKillWorker SIGKILLs the worker only and restarts it after
	// Delay (kept short: its agent stays up and holds its tasks).
	FaultKillWorker FaultKind = "kill-worker"
	// FaultPause SIGSTOPs agent and worker for Delay, sometimes past the
	// session timeout (a zombie), then SIGCONTs them.
	FaultPause FaultKind = "pause"
	// FaultNATS SIGKILLs the nats-server and restarts it on the same port
	// and store after Delay.
	FaultNATS FaultKind = "nats-restart"
	// FaultLeave makes a member leave through POST /leave; it exits.
	FaultLeave FaultKind = "leave"
	// FaultJoin starts a member: one that left, with its data dir, or a
	// new one.
	FaultJoin FaultKind = "join"
	// FaultTerminate SIGTERMs a member's agent (a graceful leave and
	// exit) and restarts it once it has exited.
	FaultTerminate FaultKind = "terminate"
	// FaultRolling SIGTERMs and restarts every member in turn, each once
	// the group has settled without it.
	FaultRolling FaultKind = "rolling-restart"
)

// faultKinds is every kind, in the order of the schedule's first round.
var faultKinds = []FaultKind{FaultKillMember, FaultKillAgent, FaultKillWorker, FaultPause, FaultNATS,
	FaultLeave, FaultJoin, FaultTerminate, FaultRolling}

// Fault is one step of a chaos schedule.
type Fault struct {
	N      int    // 1-based position in the schedule
	Seed   uint64 // the schedule's seed
	Kind   FaultKind
	Member string        // the member it hits; "" for NATS and rolling restarts
	Delay  time.Duration // how long the fault lasts before its recovery
	// Settle says to wait until the group has settled before the next
	// fault; otherwise the next one lands while the group still reacts.
	Settle bool
	Gap    time.Duration // time between this fault's recovery and the next fault
}

func (f Fault) String() string {
	s := string(f.Kind)
	if f.Member != "" {
		s += " " + f.Member
	}
	if f.Delay > 0 {
		s += fmt.Sprintf(" for %s", f.Delay.Round(time.Millisecond))
	}
	next := "next fault without waiting to settle"
	if f.Settle {
		next = "settle"
	}
	return fmt.Sprintf("%s; then %s, gap %s", s, next, f.Gap.Round(time.Millisecond))
}

// Schedule draws a chaos schedule from a seed. It tracks the membership its
// own faults make (leaves and joins), so a seed gives the same faults, with
// the same targets and delays, in every run: a failing seed reproduces its
// schedule (not the exact interleaving of the processes' reactions). The
// first round is every kind once, in a seeded order, so every run injects
// each; then kinds are drawn by weight. Not safe for concurrent use.
type Schedule struct {
	Seed uint64
	// SessionTimeout scales the delays: kills and pauses last from well
	// under it to well past it.
	SessionTimeout time.Duration
	// MinMembers and MaxMembers bound the running members leaves and
	// joins leave.
	MinMembers, MaxMembers int

	rng     *rand.Rand
	n       int
	first   []FaultKind
	running []string // sorted
	left    []string // sorted
	named   int      // members named so far: m1..m<named>
}

// NewSchedule starts a schedule for a group of members m1..m<members>.
func NewSchedule(seed uint64, members int, sessionTimeout time.Duration) *Schedule {
	s := &Schedule{Seed: seed, SessionTimeout: sessionTimeout, MinMembers: 2, MaxMembers: members + 1,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), named: members}
	for i := 1; i <= members; i++ {
		s.running = append(s.running, fmt.Sprintf("m%d", i))
	}
	s.first = slices.Clone(faultKinds)
	s.rng.Shuffle(len(s.first), func(i, j int) { s.first[i], s.first[j] = s.first[j], s.first[i] })
	return s
}

// Running returns the members that run after the faults drawn so far.
func (s *Schedule) Running() []string { return slices.Clone(s.running) }

// Next draws the next fault and applies its effect on the membership.
func (s *Schedule) Next() Fault {
	s.n++
	kind := s.kind()
	f := Fault{N: s.n, Seed: s.Seed, Kind: kind, Settle: s.rng.IntN(10) < 7, Gap: s.between(200*time.Millisecond, 3*time.Second)}
	T := s.SessionTimeout
	switch kind {
	case FaultKillMember, FaultKillAgent:
		f.Member, f.Delay = s.pick(s.running), s.between(200*time.Millisecond, 2*T)
	case FaultKillWorker:
		f.Member, f.Delay = s.pick(s.running), s.between(100*time.Millisecond, 2*time.Second)
	case FaultPause:
		f.Member, f.Delay = s.pick(s.running), s.between(300*time.Millisecond, 5*T/2)
	case FaultNATS:
		f.Delay = s.between(200*time.Millisecond, 3*time.Second)
	case FaultTerminate:
		f.Member = s.pick(s.running)
	case FaultLeave:
		f.Member = s.pick(s.running)
		s.running = del(s.running, f.Member)
		s.left = ins(s.left, f.Member)
	case FaultJoin:
		if len(s.left) > 0 && (s.named >= s.MaxMembers+2 || s.rng.IntN(2) == 0) {
			f.Member = s.pick(s.left)
			s.left = del(s.left, f.Member)
		} else {
			s.named++
			f.Member = fmt.Sprintf("m%d", s.named)
		}
		s.running = ins(s.running, f.Member)
	}
	return f
}

// kind draws the next fault's kind: the first round's, then by weight
// among the kinds the membership allows.
func (s *Schedule) kind() FaultKind {
	for len(s.first) > 0 {
		k := s.first[0]
		s.first = s.first[1:]
		if s.allowed(k) {
			return k
		}
	}
	weights := map[FaultKind]int{FaultKillMember: 4, FaultKillAgent: 2, FaultKillWorker: 4, FaultPause: 4,
		FaultNATS: 2, FaultLeave: 1, FaultJoin: 1, FaultTerminate: 1, FaultRolling: 1}
	if len(s.running) < s.MaxMembers-1 {
		weights[FaultJoin] = 3 // back towards the starting size
	}
	total := 0
	for _, k := range faultKinds {
		if s.allowed(k) {
			total += weights[k]
		}
	}
	r := s.rng.IntN(total)
	for _, k := range faultKinds {
		if !s.allowed(k) {
			continue
		}
		if r < weights[k] {
			return k
		}
		r -= weights[k]
	}
	panic("unreachable: weights drawn past their total")
}

func (s *Schedule) allowed(k FaultKind) bool {
	switch k {
	case FaultLeave:
		return len(s.running) > s.MinMembers
	case FaultJoin:
		return len(s.running) < s.MaxMembers
	}
	return true
}

func (s *Schedule) pick(ids []string) string { return ids[s.rng.IntN(len(ids))] }

// between draws a duration in [lo, hi), in milliseconds.
func (s *Schedule) between(lo, hi time.Duration) time.Duration {
	ms := s.rng.Int64N(int64((hi-lo)/time.Millisecond)) + int64(lo/time.Millisecond)
	return time.Duration(ms) * time.Millisecond
}

func del(ids []string, id string) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(x string) bool { return x == id })
}

func ins(ids []string, id string) []string {
	out := append(slices.Clone(ids), id)
	slices.SortFunc(out, compareMemberIDs)
	return out
}

// compareMemberIDs orders m2 before m10.
func compareMemberIDs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

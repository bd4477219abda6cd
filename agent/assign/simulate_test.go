package assign

import (
	"maps"
	"time"
)

// SimRun is what Simulate observed.
type SimRun struct {
	// Plans counts the plans that changed something (generations).
	Plans     int
	Converged bool
	Final     Result
	// Moved counts, per task, how often its owner changed.
	Moved map[string]int
	// PeakLearners is the most learners in flight in any generation.
	PeakLearners int
	// Waves counts the generations that added learners.
	Waves int
}

// Simulate plans repeatedly from in, feeding each Result back as the next
// Current as if every learner and standby caught up at once and every
// revoke were released at once, and members dropped their releases once
// acted on, as agents do (members are copied, not modified); the
// clock advances by step before each plan. It stops at the first plan that
// changes nothing, or after limit plans. each, if not nil, sees every
// input and its result.
func Simulate(in Input, step time.Duration, limit int, each func(Input, Result)) SimRun {
	run := SimRun{Moved: map[string]int{}}
	in.Members = cloneMembers(in.Members)
	for n := 0; n < limit; n++ {
		in.Lags = caughtUpLags(in.Current)
		releaseAll(in.Members, in.Current, in.Now)
		res := Plan(in)
		if each != nil {
			each(in, res)
		}
		run.Final = res
		if !res.Changed {
			run.Converged = true
			return run
		}
		run.Plans++
		learners, added := 0, false
		for _, t := range res.Assignment.Tasks {
			learners += len(t.Learners)
		}
		for _, m := range res.Moves {
			switch m.Kind {
			case MovePromote, MoveFailover:
				run.Moved[m.Task]++
			case MoveLearnerAdd:
				added = true
			}
		}
		if added {
			run.Waves++
		}
		run.PeakLearners = max(run.PeakLearners, learners)
		in.Current = res.Assignment
		in.Now = in.Now.Add(step)
		for i := range in.Members {
			pruneReleases(&in.Members[i], in.Members[i].ID, in.Current)
		}
	}
	return run
}

// caughtUpLags reports lag 0 for every learner and standby of a.
func caughtUpLags(a Assignment) map[string]map[string]uint64 {
	lags := map[string]map[string]uint64{}
	for id, t := range a.Tasks {
		for _, l := range t.Learners {
			setLag(lags, id, l.Member, 0)
		}
		for _, s := range t.Standbys {
			setLag(lags, id, s, 0)
		}
	}
	return lags
}

func setLag(lags map[string]map[string]uint64, task, member string, lag uint64) {
	if lags[task] == nil {
		lags[task] = map[string]uint64{}
	}
	lags[task][member] = lag
}

// releaseAll makes every owner release the tasks being revoked from it.
func releaseAll(members []Member, a Assignment, now time.Time) {
	idx := map[string]int{}
	for i, m := range members {
		idx[m.ID] = i
	}
	for id, t := range a.Tasks {
		if t.Revoke == nil {
			continue
		}
		i, ok := idx[t.Active]
		if !ok {
			continue
		}
		if members[i].Released == nil {
			members[i].Released = map[string]Release{}
		}
		members[i].Released[id] = Release{Epoch: t.Epoch, Seq: 1000 + a.Generation, At: now}
	}
}

func cloneMembers(ms []Member) []Member {
	out := make([]Member, len(ms))
	for i, m := range ms {
		m.Positions = maps.Clone(m.Positions)
		m.Released = maps.Clone(m.Released)
		out[i] = m
	}
	return out
}

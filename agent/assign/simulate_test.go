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

// SimulateDelayed plans repeatedly from in as a group would whose owners
// release a revoked task exactly release plans after its revoke, and whose
// learners catch up exactly catchUp plans after they were placed (the
// leader publishes every plan, so each takes about as long). The members of
// arrive[n] join before plan n+1. It stops once a plan changes nothing with
// no move under way and nobody left to arrive, or after limit plans, and
// reports as Simulate does (members are copied, not modified).
func SimulateDelayed(in Input, arrive [][]Member, release, catchUp, limit int, each func(Input, Result)) SimRun {
	run := SimRun{Moved: map[string]int{}}
	in.Members = cloneMembers(in.Members)
	placed := map[[2]string]int{} // learner (task, member) -> the plan it was first seen in
	revoked := map[string]int{}   // task -> the plan its revoke was first seen in
	for n := 0; n < limit; n++ {
		if n > 0 && n <= len(arrive) {
			in.Members = append(in.Members, cloneMembers(arrive[n-1])...)
		}
		in.Lags = map[string]map[string]uint64{}
		var owners []Member // the owners that release this plan
		for id, t := range in.Current.Tasks {
			for _, l := range t.Learners {
				key := [2]string{id, l.Member}
				if _, ok := placed[key]; !ok {
					placed[key] = n
				}
				lag := uint64(1_000_000)
				if n-placed[key] >= catchUp {
					lag = 0
				}
				setLag(in.Lags, id, l.Member, lag)
			}
			for _, s := range t.Standbys {
				setLag(in.Lags, id, s, 0)
			}
			if t.Revoke == nil {
				delete(revoked, id)
				continue
			}
			if _, ok := revoked[id]; !ok {
				revoked[id] = n
			}
			if n-revoked[id] >= release {
				owners = append(owners, Member{ID: t.Active, Released: map[string]Release{id: {Epoch: t.Epoch, Seq: 1000 + in.Current.Generation, At: in.Now}}})
			}
		}
		for i := range in.Members {
			for _, o := range owners {
				if o.ID != in.Members[i].ID {
					continue
				}
				if in.Members[i].Released == nil {
					in.Members[i].Released = map[string]Release{}
				}
				maps.Copy(in.Members[i].Released, o.Released)
			}
		}
		for key := range placed {
			if t := in.Current.Tasks[key[0]]; t == nil || !t.hasLearner(key[1]) {
				delete(placed, key)
			}
		}
		res := Plan(in)
		if each != nil {
			each(in, res)
		}
		run.Final = res
		if !res.Changed && n >= len(arrive) && !underWay(in.Current) {
			run.Converged = true
			return run
		}
		if res.Changed {
			run.Plans++
		}
		for _, m := range res.Moves {
			if m.Kind == MovePromote || m.Kind == MoveFailover {
				run.Moved[m.Task]++
			}
		}
		in.Current = res.Assignment
		in.Now = in.Now.Add(100 * time.Millisecond)
		for i := range in.Members {
			pruneReleases(&in.Members[i], in.Members[i].ID, in.Current)
		}
	}
	return run
}

// underWay reports whether a move of a is under way: a learner or a revoke.
func underWay(a Assignment) bool {
	for _, t := range a.Tasks {
		if len(t.Learners) > 0 || t.Revoke != nil {
			return true
		}
	}
	return false
}

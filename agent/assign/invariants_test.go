package assign

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"
)

// fataler is what the invariant checks need of *testing.T and *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// checkPlan checks every invariant of one planning step: res = Plan(in).
// Each check is independent of how Plan computes its result.
func checkPlan(t fataler, in Input, res Result) {
	t.Helper()
	prev, next := in.Current, res.Assignment
	cfg := in.Config
	tasks, err := cfg.Tasks()
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	// eligible counts the members that may get new active tasks: live,
	// not leaving, worker attached.
	live, leaving, eligible := map[string]*Member{}, map[string]bool{}, 0
	attached := func(m *Member) bool { return m.Worker == "" || m.Worker == WorkerAttached }
	for i := range in.Members {
		m := &in.Members[i]
		live[m.ID] = m
		switch {
		case m.Leaving:
			leaving[m.ID] = true
		case attached(m):
			eligible++
		}
	}
	fail := func(task, format string, args ...any) {
		t.Helper()
		t.Fatalf("task %s: "+format+"\ninput: %s\nresult: %s", append(append([]any{task}, args...), js(in), js(res))...)
	}

	// Deterministic, and independent of the order of members.
	if again := Plan(in); !bytes.Equal(mustJSON(again), mustJSON(res)) {
		t.Fatalf("Plan is not deterministic:\n%s\n%s", js(res), js(again))
	}
	rev := in
	rev.Members = slices.Clone(in.Members)
	slices.Reverse(rev.Members)
	if again := Plan(rev); !bytes.Equal(mustJSON(again), mustJSON(res)) {
		t.Fatalf("Plan depends on the order of members:\n%s\n%s", js(res), js(again))
	}

	// The generation rises iff the state changed.
	changed := !sameJSON(prev, next)
	if res.Changed != changed {
		t.Fatalf("Changed = %v, but the state changed: %v\n%s\n%s", res.Changed, changed, js(in), js(res))
	}
	wantGen := prev.Generation
	if changed {
		wantGen++
	}
	if next.Generation != wantGen {
		t.Fatalf("generation %d, want %d", next.Generation, wantGen)
	}
	inConfig := map[string]bool{}
	for _, task := range tasks {
		inConfig[task.ID] = true
		if next.Tasks[task.ID] == nil {
			t.Fatalf("task %s of the config is missing from the assignment", task.ID)
		}
	}
	// Tasks no longer in the config stay as tombstones that keep their
	// epoch, and nothing else.
	for id, nt := range next.Tasks {
		if inConfig[id] {
			continue
		}
		var epoch uint64
		if pt := in.Current.Tasks[id]; pt != nil {
			epoch = pt.Epoch
		}
		if want := (TaskAssignment{Epoch: epoch}); !sameJSON(nt, &want) {
			t.Fatalf("removed task %s = %+v, want a tombstone with epoch %d", id, nt, epoch)
		}
	}

	moved := map[string]bool{}
	for _, m := range res.Moves {
		moved[m.Task] = true
	}
	learnerTotal, learnersOn := 0, map[string]int{}
	for _, task := range tasks {
		id := task.ID
		nt := next.Tasks[id]
		if nt == nil {
			fail(id, "missing from the assignment")
		}
		pt := prev.Tasks[id]
		if pt == nil {
			pt = &TaskAssignment{}
		}
		if !sameJSON(pt, nt) && !moved[id] {
			fail(id, "changed without a move explaining it")
		}

		// Who may hold a role.
		if nt.Active != "" && live[nt.Active] == nil {
			fail(id, "owned by dead member %s", nt.Active)
		}
		if eligible > 0 && nt.Active == "" {
			fail(id, "unowned although %d members are eligible", eligible)
		}
		if eligible == 0 && nt.Active != "" && (nt.Revoke == nil || nt.Revoke.Target != "") && (leaving[nt.Active] || live[nt.Active].Worker == WorkerLost) {
			fail(id, "still owned by %s although no member is eligible, and not being retired", nt.Active)
		}
		// A member whose worker is not attached gets no new active task;
		// one whose worker is detached keeps those it has; one whose
		// worker is lost keeps none.
		if m := live[nt.Active]; m != nil && !attached(m) && pt.Active != nt.Active {
			fail(id, "given to %s, whose worker is %s", nt.Active, m.Worker)
		}
		if m := live[nt.Active]; m != nil && m.Worker == WorkerLost {
			fail(id, "still owned by %s, whose worker is lost", nt.Active)
		}
		if m := live[pt.Active]; m != nil && m.Worker == WorkerDetached && !m.Leaving && pt.Revoke == nil && nt.Active != pt.Active {
			fail(id, "moved off %s, whose worker is only detached", pt.Active)
		}
		// A task activated in this generation is not revoked in it.
		if nt.Active != "" && nt.Revoke != nil && (nt.Active != pt.Active || nt.Epoch != pt.Epoch) {
			fail(id, "activated on %s and revoked towards %s in one generation", nt.Active, nt.Revoke.Target)
		}
		if nt.Revoke != nil && nt.Revoke.Target == "" && eligible > 0 {
			fail(id, "retired (revoked to nobody) although %d members are eligible", eligible)
		}
		if leaving[nt.Active] && pt.Active != nt.Active {
			fail(id, "given to leaving member %s", nt.Active)
		}
		if r := nt.Revoke; r != nil && r.Target != "" {
			if live[r.Target] == nil || leaving[r.Target] || !attached(live[r.Target]) || r.Target == nt.Active {
				fail(id, "revoke target %s is not an eligible member other than the owner", r.Target)
			}
		}
		if len(nt.Learners) > 1 {
			fail(id, "%d learners, want at most one", len(nt.Learners))
		}
		for _, l := range nt.Learners {
			if !task.Stateful || live[l.Member] == nil || leaving[l.Member] || l.Member == nt.Active || slices.Contains(nt.Standbys, l.Member) {
				fail(id, "learner %s should not be there", l.Member)
			}
			if nt.Revoke == nil { // a learner being promoted to has caught up: it no longer counts
				learnerTotal++
				learnersOn[l.Member]++
			}
		}
		// One standby more than configured while one moves (the new copy
		// is built before the old one is dropped), and only then.
		if n := len(nt.Standbys); n > max(cfg.Standbys, 0)+1 || cfg.Standbys <= 0 && n > 0 {
			fail(id, "%d standbys, want at most %d (+1 while one moves)", len(nt.Standbys), cfg.Standbys)
		}
		// A moving standby is dropped only once the copies the task keeps
		// are warm: never fewer warm copies than configured.
		for _, m := range res.Moves {
			if m.Task != id || m.Kind != MoveStandbyDrop || m.Reason != reasonBalance {
				continue
			}
			warm := func(ss []string) int {
				n := 0
				for _, s := range ss {
					if lag, ok := in.Lags[id][s]; ok && lag <= cfg.AcceptableLag {
						n++
					}
				}
				return n
			}
			if w := warm(nt.Standbys); w < min(max(cfg.Standbys, 0), warm(pt.Standbys)) {
				fail(id, "standby %s dropped for balance, leaving %d warm standbys of %v", m.To, w, nt.Standbys)
			}
		}
		for j, s := range nt.Standbys {
			if !task.Stateful || live[s] == nil || leaving[s] || s == nt.Active || slices.Contains(nt.Standbys[j+1:], s) {
				fail(id, "standby %s should not be there", s)
			}
		}

		// Epochs rise by one exactly when the owner changes.
		switch {
		case nt.Epoch < pt.Epoch:
			fail(id, "epoch went down from %d to %d", pt.Epoch, nt.Epoch)
		case nt.Active != pt.Active && nt.Active != "" && nt.Epoch != pt.Epoch+1:
			fail(id, "owner changed %q -> %q with epoch %d -> %d", pt.Active, nt.Active, pt.Epoch, nt.Epoch)
		case nt.Active == "" && nt.Epoch != pt.Epoch:
			fail(id, "unassigned but epoch changed %d -> %d", pt.Epoch, nt.Epoch)
		case nt.Active == pt.Active && nt.Epoch != pt.Epoch:
			// Only a withdrawn revoke that had been released re-grants.
			owner := live[pt.Active]
			if pt.Revoke == nil || nt.Revoke != nil || owner == nil || owner.Released[id].Epoch != pt.Epoch || nt.Epoch != pt.Epoch+1 {
				fail(id, "epoch %d -> %d without a change of owner", pt.Epoch, nt.Epoch)
			}
		}

		// A live owner hands a task over only through a revoke of an
		// earlier generation, completed by a release or its timeout.
		// A lost worker's task moves at once, with its agent's release.
		if old := live[pt.Active]; old != nil && old.Worker == WorkerLost && nt.Active != pt.Active && nt.Active != "" {
			wantSeq := uint64(0)
			if rel, ok := old.Released[id]; ok && rel.Epoch == pt.Epoch {
				wantSeq = rel.Seq
			}
			if nt.HandoffSeq != wantSeq {
				fail(id, "moved off lost %s with handoffSeq %d, want %d", pt.Active, nt.HandoffSeq, wantSeq)
			}
		} else if old != nil && nt.Active != pt.Active && nt.Active != "" {
			if pt.Revoke == nil || pt.Revoke.Target != nt.Active {
				fail(id, "moved %s -> %s without a revoke to %s in the previous generation", pt.Active, nt.Active, nt.Active)
			}
			rel, ok := old.Released[id]
			released := ok && rel.Epoch == pt.Epoch
			if !released && in.Now.Before(pt.Revoke.Since.Add(cfg.ReleaseTimeout.D())) {
				fail(id, "promoted before release or release timeout")
			}
			wantSeq := uint64(0)
			if released {
				wantSeq = rel.Seq
			}
			if nt.HandoffSeq != wantSeq {
				fail(id, "handoffSeq %d, want %d", nt.HandoffSeq, wantSeq)
			}
		}

		// A stateful revoke starts only towards a warm copy that has caught
		// up, or when the owner's leave timeout has passed.
		if r := nt.Revoke; r != nil && task.Stateful && cfg.Handover != Cold && (pt.Revoke == nil || *pt.Revoke != *r) {
			if r.Target == "" {
				if eligible > 0 || !leaving[nt.Active] {
					fail(id, "retired while %d members are eligible (owner leaving: %v)", eligible, leaving[nt.Active])
				}
			} else if r.Reason == reasonLeaveTimeout {
				since, ok := next.Leaving[nt.Active]
				if !leaving[nt.Active] || !ok || in.Now.Before(since.Add(cfg.LeaveTimeout.D())) {
					fail(id, "leave-timeout revoke before the leave timeout")
				}
			} else {
				if !pt.hasLearner(r.Target) && !slices.Contains(pt.Standbys, r.Target) {
					fail(id, "revoke to %s, which was neither a learner nor a standby", r.Target)
				}
				if lag, ok := in.Lags[id][r.Target]; !ok || lag > cfg.AcceptableLag {
					fail(id, "revoke to %s whose lag is %d (known %v), above %d", r.Target, lag, ok, cfg.AcceptableLag)
				}
			}
		}

		// Eager: a caught-up learner is revoked to in the very next plan,
		// unless its member's worker is not attached (it warms ahead).
		if cfg.Handover == Eager && pt.Revoke == nil && len(pt.Learners) == 1 && nt.Active == pt.Active {
			l := pt.Learners[0].Member
			if m := live[l]; m != nil && !attached(m) {
				continue
			}
			if lag, ok := in.Lags[id][l]; ok && lag <= cfg.AcceptableLag && nt.hasLearner(l) && (nt.Revoke == nil || nt.Revoke.Target != l) {
				fail(id, "eager: learner %s caught up but no revoke", l)
			}
		}
	}

	// Learner bounds.
	if cfg.MaxLearners > 0 && learnerTotal > cfg.MaxLearners {
		t.Fatalf("%d learners, above maxLearners %d\n%s", learnerTotal, cfg.MaxLearners, js(res))
	}
	for m, n := range learnersOn {
		if cfg.MaxLearnersPerMember > 0 && n > cfg.MaxLearnersPerMember {
			t.Fatalf("%d learners on %s, above maxLearnersPerMember %d\n%s", n, m, cfg.MaxLearnersPerMember, js(res))
		}
	}

	if losses, misplaced, _ := checkZoneMoves(in, res); len(losses)+len(misplaced) > 0 {
		t.Fatalf("zones: %v\ninput: %s\nresult: %s", append(losses, misplaced...), js(in), js(res))
	}
	checkRounds(t, in, res)
	checkLeaving(t, in, res, live, leaving)
	checkStill(t, in, res)
	checkWarmSteady(t, in, res)
}

// checkWarmSteady checks that learners on members whose worker is
// detached do not flap: planning the result again with the same input
// neither drops a learner the result added on such a member nor adds back
// one the result dropped. As in checkStill, a result that activates a
// task may be followed by one more step: the new owners change the
// quotas' tie-breaks, and so the tasks bound for the detached member.
func checkWarmSteady(t fataler, in Input, res Result) {
	t.Helper()
	if activates(res) {
		return
	}
	detached := map[string]bool{}
	for _, m := range in.Members {
		if m.Worker == WorkerDetached && !m.Leaving {
			detached[m.ID] = true
		}
	}
	if len(detached) == 0 {
		return
	}
	type key struct{ task, member string }
	kinds := func(r Result) map[key]MoveKind {
		out := map[key]MoveKind{}
		for _, m := range r.Moves {
			if (m.Kind == MoveLearnerAdd || m.Kind == MoveLearnerDrop) && detached[m.To] {
				out[key{m.Task, m.To}] = m.Kind
			}
		}
		return out
	}
	first := kinds(res)
	if len(first) == 0 {
		return
	}
	again := in
	again.Current = res.Assignment
	r := Plan(again)
	for k, kind := range kinds(r) {
		if was, ok := first[k]; ok && was != kind {
			t.Fatalf("learner of %s on detached %s flaps: %s then %s\ninput: %s\nfirst result: %s\nsecond result: %s",
				k.task, k.member, was, kind, js(in), js(res), js(r))
		}
	}
}

// checkRounds checks the stable mode's rounds.
func checkRounds(t fataler, in Input, res Result) {
	t.Helper()
	prev, next := in.Current, res.Assignment
	detached := map[string]bool{}
	for _, m := range in.Members {
		detached[m.ID] = m.Worker == WorkerDetached
	}
	if in.Config.Handover != Stable {
		if next.Round != nil {
			t.Fatalf("eager mode with a round: %s", js(next.Round))
		}
		return
	}
	inFlight := func(id string) bool {
		nt := next.Tasks[id]
		return nt != nil && (nt.Revoke != nil || len(nt.Learners) > 0)
	}
	if r := next.Round; r != nil {
		for _, id := range r.Tasks {
			if !inFlight(id) {
				t.Fatalf("round lists %s, which has no learner or revoke\n%s", id, js(res))
			}
		}
	}
	added, revokedInRound := false, false
	for id, nt := range next.Tasks {
		pt := prev.Tasks[id]
		if pt == nil {
			pt = &TaskAssignment{}
		}
		for _, l := range nt.Learners {
			if !pt.hasLearner(l.Member) && !detached[l.Member] {
				// (a detached member's learner warms ahead of its
				// worker, outside the rounds)
				added = true
				if next.Round == nil || !slices.Contains(next.Round.Tasks, id) {
					t.Fatalf("new learner %s of %s is not in the round\n%s", l.Member, id, js(res))
				}
			}
		}
		if r := nt.Revoke; r != nil && pt.Revoke == nil && r.Reason != reasonLeaveTimeout && pt.hasLearner(r.Target) &&
			prev.Round != nil && slices.Contains(prev.Round.Tasks, id) {
			revokedInRound = true
		}
	}
	// A move of the previous round is alive while its learner stays
	// (its learner has not caught up yet: a task being revoked is done
	// learning, so the next round may start). A learner on a detached
	// member only warms ahead of its worker: it leaves the round.
	alive := func(id string) bool {
		pt, nt := prev.Tasks[id], next.Tasks[id]
		if pt == nil || nt == nil || nt.Active != pt.Active || nt.Revoke != nil {
			return false
		}
		for _, l := range pt.Learners {
			if nt.hasLearner(l.Member) && !detached[l.Member] {
				return true
			}
		}
		return false
	}
	if added && prev.Round != nil {
		for _, id := range prev.Round.Tasks {
			if alive(id) {
				t.Fatalf("new learners while round %d still has %s in flight\n%s\n%s", prev.Round.ID, id, js(in), js(res))
			}
		}
	}
	if revokedInRound && in.Now.Before(prev.Round.Started.Add(in.Config.StableMaxWait.D())) {
		for _, id := range prev.Round.Tasks {
			// A learner of the round still learning (not a new one of the
			// next round, after the task's destination changed, nor one
			// whose member's worker detached: it only warms ahead now).
			if nt, pt := next.Tasks[id], prev.Tasks[id]; nt != nil && pt != nil && nt.Revoke == nil && len(nt.Learners) > 0 &&
				pt.hasLearner(nt.Learners[0].Member) && !detached[nt.Learners[0].Member] {
				t.Fatalf("stable: round revoked before all caught up (%s is not)\n%s\n%s", id, js(in), js(res))
			}
		}
	}
}

// checkLeaving checks leaving members and Result.Shutdown.
func checkLeaving(t fataler, in Input, res Result, live map[string]*Member, leaving map[string]bool) {
	t.Helper()
	next := res.Assignment
	owns := map[string]bool{}
	for _, nt := range next.Tasks {
		owns[nt.Active] = true
	}
	var want []string
	for _, m := range in.Members {
		if m.Leaving && !owns[m.ID] {
			want = append(want, m.ID)
		}
	}
	slices.Sort(want)
	if !slices.Equal(res.Shutdown, want) {
		t.Fatalf("shutdown %v, want %v\n%s", res.Shutdown, want, js(res))
	}
	for m, since := range next.Leaving {
		if !leaving[m] {
			t.Fatalf("leaving lists %s, which is not a live leaving member", m)
		}
		if old, ok := in.Current.Leaving[m]; ok && !old.Equal(since) || !ok && !since.Equal(in.Now) {
			t.Fatalf("leaving[%s] = %v, want the time first seen", m, since)
		}
	}
	if len(next.Leaving) != len(leaving) {
		t.Fatalf("leaving %v, want every leaving member %v", next.Leaving, leaving)
	}
}

// lagsOfRoles returns the lags of lags whose learner or standby still holds
// its role in a: as the leader does, a report from before a role was
// dropped does not count for it once it is given again.
func lagsOfRoles(lags map[string]map[string]uint64, a Assignment) map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	for task, byMember := range lags {
		for m, lag := range byMember {
			if t := a.Tasks[task]; t != nil && (t.hasLearner(m) || slices.Contains(t.Standbys, m)) {
				setLag(out, task, m, lag)
			}
		}
	}
	return out
}

// checkStill checks that the result is a fixed point for the same input,
// and that NextDeadline is exactly when that stops being true. It holds
// when lags come only from the current learners and standbys, as progress
// reports do; a lag on record for any other member would make the learner
// the plan adds promotable in the next plan, a legitimate second step. A
// role a plan drops loses its lag for the plans after it (lagsOfRoles).
func checkStill(t fataler, in Input, res Result) {
	t.Helper()
	for task, byMember := range in.Lags {
		for m := range byMember {
			if ct := in.Current.Tasks[task]; ct == nil || !ct.hasLearner(m) && !slices.Contains(ct.Standbys, m) {
				return
			}
		}
	}
	again := in
	again.Current = res.Assignment
	again.Lags = lagsOfRoles(in.Lags, res.Assignment)
	if r := Plan(again); r.Changed {
		// A task activated in a plan stays where it landed in that plan,
		// even if balance would rather have it elsewhere: the next plan
		// may then move it (one step), and only that one.
		// Standbys may take a second step too: a standby move decided on
		// the copies a plan's own trims left.
		// So may learners that warm ahead on a detached member: the
		// tasks bound for it follow from the learners and standbys this
		// plan dropped.
		if !activates(res) && !onlyStandbysOrWarm(in, r) {
			t.Fatalf("planning the result again changes it:\nfirst input: %s\nfirst result: %s\nsecond result: %s", js(in), js(res), js(r))
		}
		if activates(r) {
			t.Fatalf("planning the result again activates more:\nfirst input: %s\nfirst result: %s\nsecond result: %s", js(in), js(res), js(r))
		}
		// Then only standby moves may follow (each finishing or starting
		// a warm move on the copies the last one left), a few at most.
		for step := 0; ; step++ {
			res = r
			again.Current = r.Assignment
			again.Lags = lagsOfRoles(again.Lags, r.Assignment)
			if r = Plan(again); !r.Changed {
				break
			}
			if step == 3 || !onlyStandbysOrWarm(in, r) {
				t.Fatalf("no fixed point %d plans after activations:\nfirst input: %s\nlast result: %s\nnext result: %s", step+2, js(in), js(res), js(r))
			}
		}
	}
	d := res.NextDeadline
	if d.IsZero() {
		again.Now = in.Now.Add(1000 * time.Hour)
		if r := Plan(again); r.Changed {
			t.Fatalf("no deadline, yet time alone changes the plan at %v:\n%s\n%s", again.Now, js(again), js(r))
		}
		return
	}
	if !d.After(in.Now) {
		t.Fatalf("next deadline %v is not after now %v", d, in.Now)
	}
	again.Now = d.Add(-time.Nanosecond)
	if r := Plan(again); r.Changed {
		t.Fatalf("the plan changes before the deadline %v:\n%s", d, js(r))
	}
	again.Now = d
	if r := Plan(again); !r.Changed {
		t.Fatalf("nothing changes at the deadline %v:\n%s", d, js(again))
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func js(v any) string { return string(mustJSON(v)) }

// sameJSON compares two states as JSON, ignoring the generation and
// treating a nil task map like an empty one.
func sameJSON(a, b any) bool {
	norm := func(v any) any {
		if x, ok := v.(Assignment); ok {
			x.Generation = 0
			if x.Tasks == nil {
				x.Tasks = map[string]*TaskAssignment{}
			}
			return x
		}
		return v
	}
	return bytes.Equal(mustJSON(norm(a)), mustJSON(norm(b)))
}

// activates reports whether res gives any task a new owner.
func activates(res Result) bool {
	for _, m := range res.Moves {
		switch m.Kind {
		case MoveAssign, MoveFailover, MovePromote, MoveRevokeCancel: // a cancelled revoke that was released re-grants
			return true
		}
	}
	return false
}

// onlyStandbysOrWarm reports whether every move of res is a standby's or
// adds a learner on a member of in whose worker is detached.
func onlyStandbysOrWarm(in Input, res Result) bool {
	detached := map[string]bool{}
	for _, m := range in.Members {
		detached[m.ID] = m.Worker == WorkerDetached
	}
	for _, m := range res.Moves {
		if m.Kind != MoveStandbyAdd && m.Kind != MoveStandbyDrop && !(m.Kind == MoveLearnerAdd && detached[m.To]) {
			return false
		}
	}
	return true
}

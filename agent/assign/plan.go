package assign

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
//   - setDestinations: the destination of every task, balancing stateful,
//     stateless and all actives at once over the members whose worker is
//     attached, orphans (dead owner, lost worker, no owner) included; and,
//     when a member's worker is detached, the destinations the same
//     balance gives were it attached (warm ahead);
//   - placeOrphans: give orphans their destination at once (failover);
//   - reconcile: learners towards destinations, and on detached members
//     towards the tasks bound for them (within Config.MaxLearners and
//     MaxLearnersPerMember), revokes of tasks whose learner or standby
//     has caught up (per Config.Handover), stateless moves;
//   - placeStandbys: the standby target (zones, then the balance of
//     copies, then the copies in place), and the standbys moved towards it.
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
	if len(p.attached) == 0 {
		p.unassignAll()
	}
	p.promote()
	if len(p.attached) > 0 {
		p.setDestinations()
		p.placeOrphans()
		p.reconcile()
	}
	p.placeStandbys()
	return p.result()
}

// Package assign is handoff's assignor: a pure function, Plan, from what the
// leader knows (the group's config, its live members, the current assignment,
// learners' lags and the time) to the next assignment and the reasons for
// each change.
//
// Plan does no I/O, reads no clock but Input.Now and uses no randomness; the
// same Input always gives the same Result, byte for byte once JSON-encoded.
// The leader calls it on every event (a member joined, left or expired, a
// learner reported progress, a task was released, a deadline passed) and
// publishes the result when Result.Changed is true.
//
// One call takes a single step towards a balanced assignment; it never skips
// a step that needs an acknowledgement from a member. A planned move of a
// stateful task goes learner → revoke → promote over at least three
// generations, a stateless move revoke → promote over two, so a caller that
// feeds each Result back as the next Input's Current converges. A revoke
// that names its target's epoch asks for a direct hand-off: the target
// takes the task over from the old owner's release entry (or message)
// before any plan, and the next plan records it, whatever it planned
// meanwhile (handoff.go).
//
// # Move reasons
//
// Move.Reason and Revoke.Reason are short, stable words:
//
//	balance             the task moves so that members hold their share
//	leave               the owner is leaving
//	leave-timeout       the owner's leave timeout passed; the target may be cold
//	unowned             an unowned task got an owner
//	owner-dead          the owner's lease expired
//	released            the old owner released the task
//	handed-over         the old owner's release entry named the new owner,
//	                    which took the task over directly (adoptHandoffs)
//	taken-over          the new owner reported that it took the task over
//	                    from such an entry (adoptHandoffs)
//	release-timeout     the old owner did not release in time and is fenced
//	no-eligible-member  no live member that is not leaving, with its worker
//	                    attached, can own the task
//	worker-lost         the owner's worker is lost; its agent released the task
//	removed-from-config the task is no longer in the group's config
//	member-dead         a learner or standby's member died
//	member-leaving      a learner or standby's member started leaving
//	target-dead         a revoke's target died
//	target-leaving      a revoke's target started leaving
//	target-detached     a revoke's target has no worker attached
//	not-needed          a learner is no longer the task's destination
//	max-learners        a learner was dropped to respect the learner bounds
//	standbys            a standby was placed to reach Config.Standbys
//	too-many            a standby was dropped to respect Config.Standbys
//	zones               a standby moved so that its task's copies span more zones
//	stateless           a learner or standby was listed on a stateless task
//	is-active           a learner or standby entry named the task's owner
package assign

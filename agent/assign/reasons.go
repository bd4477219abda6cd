package assign

// The vocabulary of Move.Reason and Revoke.Reason, listed in the package doc.
const (
	reasonBalance        = "balance"
	reasonLeave          = "leave"
	reasonLeaveTimeout   = "leave-timeout"
	reasonUnowned        = "unowned"
	reasonOwnerDead      = "owner-dead"
	reasonReleased       = "released"
	reasonHandedOver     = "handed-over" // adoptHandoffs: the owner's release entry named the new owner
	reasonTakenOver      = "taken-over"  // adoptHandoffs: the new owner reported it took the task over from such an entry
	reasonReleaseTimeout = "release-timeout"
	reasonNoMember       = "no-eligible-member"
	reasonWorkerLost     = "worker-lost"
	reasonTargetDetached = "target-detached"
	reasonRemoved        = "removed-from-config"
	reasonMemberDead     = "member-dead"
	reasonMemberLeaving  = "member-leaving"
	reasonTargetDead     = "target-dead"
	reasonTargetLeaving  = "target-leaving"
	reasonNotNeeded      = "not-needed"
	reasonMaxLearners    = "max-learners"
	reasonStandbys       = "standbys"
	reasonTooMany        = "too-many"
	reasonZones          = "zones"
	reasonStateless      = "stateless"
	reasonIsActive       = "is-active"
)

package scenario

import (
	"github.com/handoffhq/handoff/internal/cluster"
	"github.com/handoffhq/handoff/internal/proc"
)

// The processes a scenario runs, the binaries and the NATS servers come from
// internal/proc; a member run as processes and the readers of its logs come
// from internal/cluster, which the lab behind handoff-lab bench shares.
type (
	Binaries   = proc.Binaries
	Process    = proc.Process
	NATSServer = proc.NATSServer

	// Member is one member of the group: a handoff agent process and its
	// counter worker process (cluster.Process).
	Member     = cluster.Process
	AgentLog   = cluster.AgentLog
	EventLog   = cluster.EventLog
	Activation = cluster.Activation
	Takeover   = cluster.Takeover
)

// Build builds the binaries once per process (proc.Build).
func Build() (Binaries, error) { return proc.Build() }

// RemoveBuilds deletes what Build made; call it from TestMain after m.Run.
func RemoveBuilds() { proc.RemoveBuilds() }

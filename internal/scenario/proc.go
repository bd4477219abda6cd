package scenario

import "github.com/handoffhq/handoff/internal/proc"

// The processes a scenario runs, the binaries and the NATS servers come from
// internal/proc, which the multi-process bench shares.
type (
	Binaries   = proc.Binaries
	Process    = proc.Process
	NATSServer = proc.NATSServer
	lineReader = proc.LineReader
)

// Build builds the binaries once per process (proc.Build).
func Build() (Binaries, error) { return proc.Build() }

// RemoveBuilds deletes what Build made; call it from TestMain after m.Run.
func RemoveBuilds() { proc.RemoveBuilds() }

package agent

// SetAfterReleaseAppend makes a call f between the append of each release
// entry and the release's record: a test can stop the agent there, as a
// crash right after the append would.
func SetAfterReleaseAppend(a *Agent, f func()) { a.afterReleaseAppend = f }

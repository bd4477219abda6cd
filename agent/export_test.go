package agent

// SetAfterReleaseAppend makes a call f between the append of each release
// entry and the release's record: a test can stop the agent there, as a
// crash right after the append would.
func SetAfterReleaseAppend(a *Agent, f func()) { a.afterReleaseAppend = f }

// SetAfterPublishWrite makes a leader call f after each write of a
// generation's publication, with the key written: a test stops the leader
// there, as a crash or a pause at that step would.
func SetAfterPublishWrite(a *Agent, f func(key string)) { a.afterPublishWrite.Store(&f) }

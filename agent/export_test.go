package agent

// SetAfterReleaseAppend makes a call f between the append of each release
// entry and the release's record: a test can stop the agent there, as a
// crash right after the append would.
func SetAfterReleaseAppend(a *Agent, f func()) { a.afterReleaseAppend = f }

// CachedKeys returns how many keys the record cache of task on a holds,
// and whether the task has one (it is active there, with the caches on).
func CachedKeys(a *Agent, task string) (int, bool) {
	a.mu.Lock()
	t := a.tasks[task]
	a.mu.Unlock()
	if t == nil {
		return 0, false
	}
	c := t.state().cache
	if c == nil {
		return 0, false
	}
	n, _ := c.len()
	return n, true
}

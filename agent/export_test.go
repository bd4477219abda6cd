package agent

import "time"

// SetAfterReleaseAppend makes a call f between the append of each release
// entry and the release's record: a test can stop the agent there, as a
// crash right after the append would.
func SetAfterReleaseAppend(a *Agent, f func()) { a.afterReleaseAppend = f }

// SetAfterPublishWrite makes a leader call f after each write of a
// generation's publication, with the key written: a test stops the leader
// there, as a crash or a pause at that step would.
func SetAfterPublishWrite(a *Agent, f func(key string)) { a.afterPublishWrite.Store(&f) }

// SetPublishBatchFrom makes leaders started after it write n or more
// changed assignments in atomic batches, and returns the undo.
func SetPublishBatchFrom(n int) (undo func()) {
	prev := publishBatchFrom
	publishBatchFrom = n
	return func() { publishBatchFrom = prev }
}

// Incoming reports whether a holds its catch-ups for a hand-off of task to
// it, and whether its catch-ups are held at all.
func Incoming(a *Agent, task string) (incoming, held bool) {
	return a.incoming.has(task), a.learnerLimit.Held()
}

// SetIncomingHold sets how long a hand-off holds its successor's
// catch-ups at most, for agents started after it, and returns the undo.
func SetIncomingHold(d time.Duration) (undo func()) {
	prev := incomingHold
	incomingHold = d
	return func() { incomingHold = prev }
}

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

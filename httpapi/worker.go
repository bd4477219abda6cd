package httpapi

import (
	"sync"
	"time"
)

// DefaultWorkerGrace is how long the worker still counts as attached after
// its last GET /assignment ended. A worker that follows docs/api.md polls
// again at once, so the grace only has to cover the moment between two
// polls: the view being handled, a release sent between them, a GC pause.
const DefaultWorkerGrace = time.Second

// WorkerObserver is told when the member's worker attaches to the API and
// when it detaches. The worker is attached while a GET /assignment is
// open (a long-poll, or a plain read) or one ended less than the grace
// (Options.WorkerGrace) ago. The calls alternate, starting with
// WorkerAttached (the worker counts as detached until its first poll);
// they are made one at a time, in order, from request handlers and a
// timer, so an implementation must return quickly and must not call the
// API.
type WorkerObserver interface {
	// WorkerAttached says a GET /assignment began, at at, while the worker
	// counted as detached.
	WorkerAttached(at time.Time)
	// WorkerDetached says no GET /assignment has been open for the grace.
	// since is when the last one ended: the worker has been gone since
	// then, the grace included.
	WorkerDetached(since time.Time)
}

// workerTracker counts the open GET /assignment requests and tells its
// observer about attachments and detachments, until it is closed. A nil
// tracker tracks nothing. It is safe for concurrent use.
type workerTracker struct {
	obs   WorkerObserver
	grace time.Duration

	mu       sync.Mutex
	open     int
	attached bool
	lastEnd  time.Time
	// timer ends the grace; turn tells a callback that fired while a poll
	// began (it cannot always be stopped in time) that its grace is over.
	timer  *time.Timer
	turn   uint64
	closed bool
}

// newWorkerTracker returns a tracker reporting to obs, or nil if obs is nil.
func newWorkerTracker(obs WorkerObserver, grace time.Duration) *workerTracker {
	if obs == nil {
		return nil
	}
	if grace <= 0 {
		grace = DefaultWorkerGrace
	}
	return &workerTracker{obs: obs, grace: grace}
}

// begin records that a GET /assignment began; the func it returns records
// its end and must be called once.
func (t *workerTracker) begin() (end func()) {
	if t == nil {
		return func() {}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return func() {}
	}
	t.open++
	t.turn++
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	if !t.attached {
		t.attached = true
		t.obs.WorkerAttached(time.Now())
	}
	return t.end
}

func (t *workerTracker) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.open--
	if t.open > 0 || t.closed {
		return
	}
	t.lastEnd = time.Now()
	t.turn++
	turn := t.turn
	t.timer = time.AfterFunc(t.grace, func() { t.graceOver(turn) })
}

// graceOver reports the detachment unless a poll began since turn.
func (t *workerTracker) graceOver(turn uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if turn != t.turn || t.open > 0 || !t.attached || t.closed {
		return
	}
	t.attached = false
	t.timer = nil
	t.obs.WorkerDetached(t.lastEnd)
}

// close stops the tracker: the grace running ends without a report, and
// nothing is reported after close returns. The API's Run closes it once
// it has stopped serving, so that no report outlives the server.
func (t *workerTracker) close() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
}

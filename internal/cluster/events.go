package cluster

import (
	"encoding/json"
	"sync"

	"github.com/handoffhq/handoff/internal/proc"
	"github.com/handoffhq/handoff/internal/record"
)

// EventLog is a counter worker's --events file as it grows, across the
// worker's restarts (the worker appends). Safe for concurrent use.
type EventLog struct {
	member string
	r      proc.LineReader

	mu     sync.Mutex
	events []record.Event
}

// NewEventLog reads the events of member's worker at path (which may not
// exist yet).
func NewEventLog(member, path string) *EventLog {
	l := &EventLog{member: member}
	l.r = proc.LineReader{Path: path, Parse: l.add}
	return l
}

func (l *EventLog) add(line []byte) error {
	var e record.Event
	if err := json.Unmarshal(line, &e); err != nil {
		return err
	}
	e.Member = l.member
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
	return nil
}

// Events reads what the worker wrote since the last call and returns every
// event so far, in the order written.
func (l *EventLog) Events() ([]record.Event, error) { return l.From(0) }

// From is Events without the first i events: a caller that has taken in
// i events asks for the rest.
func (l *EventLog) From(i int) ([]record.Event, error) {
	err := l.r.Refresh()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]record.Event(nil), l.events[min(max(i, 0), len(l.events)):]...), err
}

// Bad returns how many lines could not be parsed, and the last of them.
func (l *EventLog) Bad() (int, string) { return l.r.Bad() }

// workerLog is a counter worker's own log (its stderr) as it grows, across
// restarts: it counts the worker's starts, so that a member is taken for
// started only once its worker is connected to NATS and reads the input
// stream.
type workerLog struct {
	r proc.LineReader

	mu      sync.Mutex
	started int
}

func newWorkerLog(path string) *workerLog {
	l := &workerLog{}
	l.r = proc.LineReader{Path: path, Parse: l.add}
	return l
}

func (l *workerLog) add(line []byte) error {
	var w struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(line, &w); err != nil {
		return err
	}
	if w.Message == "counter started" {
		l.mu.Lock()
		l.started++
		l.mu.Unlock()
	}
	return nil
}

// starts returns how many times the worker has logged that it started.
func (l *workerLog) starts() int {
	_ = l.r.Refresh()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started
}

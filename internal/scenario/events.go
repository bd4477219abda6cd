package scenario

import (
	"encoding/json"
	"sync"

	"github.com/handoffhq/handoff/internal/invariants"
)

// EventLog is a counter worker's --events file as it grows, across the
// worker's restarts (the worker appends). Safe for concurrent use.
type EventLog struct {
	member string
	r      lineReader

	mu     sync.Mutex
	events []invariants.Event
}

func newEventLog(member, path string) *EventLog {
	l := &EventLog{member: member}
	l.r = lineReader{Path: path, Parse: l.add}
	return l
}

func (l *EventLog) add(line []byte) error {
	var e invariants.Event
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
func (l *EventLog) Events() ([]invariants.Event, error) {
	err := l.r.Refresh()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]invariants.Event(nil), l.events...), err
}

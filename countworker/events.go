package countworker

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/client"
)

// Event is one step of a task's life on this worker, as the event log
// writes it.
type Event struct {
	Time  time.Time
	Kind  client.EventType // the package doc describes each
	Task  string
	Epoch uint64
	// Seq is the changelog sequence of a commit, or of the last commit
	// before a release.
	Seq uint64
	// Checkpoint is the input sequence a start resumes after, or a commit
	// or stop reached.
	Checkpoint uint64
	// Records is how many input messages a commit counted.
	Records int
	Code    string // refused: the API's error code
	Err     string // restart: why
}

// fields are the event's JSON fields besides "t" and "event".
func (e Event) fields() map[string]any {
	switch e.Kind {
	case client.EventStart, client.EventStop:
		return map[string]any{"task": e.Task, "epoch": e.Epoch, "checkpoint": e.Checkpoint}
	case client.EventCommit:
		return map[string]any{"task": e.Task, "epoch": e.Epoch, "seq": e.Seq, "checkpoint": e.Checkpoint, "records": e.Records}
	case client.EventRelease:
		return map[string]any{"task": e.Task, "epoch": e.Epoch, "seq": e.Seq}
	case client.EventRefused:
		return map[string]any{"task": e.Task, "code": e.Code}
	case client.EventRestart:
		return map[string]any{"task": e.Task, "epoch": e.Epoch, "error": e.Err}
	}
	return nil
}

// eventLog writes events as JSON lines and passes them to a callback. It is
// safe for concurrent use; with neither it discards events. Events are for
// observation: a failed write is logged once and does not stop the worker.
type eventLog struct {
	w   io.Writer
	on  func(Event)
	log zerolog.Logger

	mu     sync.Mutex
	failed bool
}

func (l *eventLog) add(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if l.on != nil {
		l.on(e)
	}
	if l.w == nil {
		return
	}
	fields := e.fields()
	line := make(map[string]any, len(fields)+2)
	for k, v := range fields {
		line[k] = v
	}
	line["t"] = e.Time.UTC().Format(time.RFC3339Nano)
	line["event"] = string(e.Kind)
	b, err := json.Marshal(line)
	if err != nil {
		return // only plain values are logged; cannot happen
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(append(b, '\n')); err != nil && !l.failed {
		l.failed = true
		l.log.Error().Err(err).Msg("write events; further failures are not logged")
	}
}

// onEvent turns the runner's events into the worker's.
func (w *counter) onEvent(ev client.Event) {
	e := Event{Time: ev.Time, Task: ev.Task, Epoch: ev.Epoch}
	switch ev.Type {
	case client.EventStart, client.EventStop:
		e.Kind = ev.Type
		e.Checkpoint, _ = DecodeCheckpoint(ev.Checkpoint)
	case client.EventRelease:
		e.Kind, e.Seq = client.EventRelease, ev.Seq
	case client.EventRefused:
		e = Event{Time: ev.Time, Kind: client.EventRefused, Task: ev.Task, Code: ev.Code}
	case client.EventRestart:
		e.Kind = client.EventRestart
		if ev.Err != nil {
			e.Err = ev.Err.Error()
		}
	case client.EventShutdown:
		e = Event{Time: ev.Time, Kind: client.EventShutdown}
	default:
		return
	}
	w.events.add(e)
}

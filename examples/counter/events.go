package main

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// eventLog writes events as JSON lines (see the package doc). It is safe
// for concurrent use; with no writer it discards events. Events are for
// observation: a failed write is logged once and does not stop the worker.
type eventLog struct {
	mu     sync.Mutex
	w      io.Writer
	log    zerolog.Logger
	failed bool
}

func (l *eventLog) write(event string, fields map[string]any) {
	l.writeAt(time.Now(), event, fields)
}

func (l *eventLog) writeAt(t time.Time, event string, fields map[string]any) {
	if l.w == nil {
		return
	}
	line := make(map[string]any, len(fields)+2)
	for k, v := range fields {
		line[k] = v
	}
	line["t"] = t.UTC().Format(time.RFC3339Nano)
	line["event"] = event
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

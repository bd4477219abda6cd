package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/internal/redact"
)

// Log timestamps have microseconds, so that the agents' events line up with
// hand-off pauses of a few milliseconds: JSON lines carry the UTC time in
// RFC 3339 with six decimals, console lines the local time of day.
const (
	logTimeJSON    = "2006-01-02T15:04:05.000000Z07:00"
	logTimeConsole = "15:04:05.000000"
)

func parseLevel(s string) (zerolog.Level, error) {
	l, err := zerolog.ParseLevel(s)
	if err != nil || s == "" {
		return zerolog.InfoLevel, fmt.Errorf("--log-level %q: use trace, debug, info, warn or error", s)
	}
	return l, nil
}

// newLogger writes JSON lines, or human-readable lines when format is
// console, or auto and w is a terminal. red, if not nil, masks secrets in
// every line.
func newLogger(w io.Writer, level, format string, red *redact.Redactor) zerolog.Logger {
	l, _ := parseLevel(level)
	console := format == "console"
	if format == "auto" {
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			console = true
		}
	}
	if red != nil {
		w = red.Writer(w)
	}
	if console {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: logTimeConsole}
	}
	return zerolog.New(w).Level(l).Hook(timestampHook{})
}

// timestampHook stamps every line with the time in logTimeJSON: zerolog's
// own Timestamp() has whole seconds unless a global is changed.
type timestampHook struct{}

func (timestampHook) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().UTC().Format(logTimeJSON))
}

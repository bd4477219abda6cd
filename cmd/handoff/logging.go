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
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(l).With().Timestamp().Logger()
}

package statestore

import (
	"fmt"
	"strings"

	"github.com/rs/zerolog"
)

// logComponent is the log field naming the library a message comes from.
const logComponent = "component"

// pebbleLogger routes Pebble's messages to zerolog: its chatty informational
// messages (flushes, compactions, WAL recycling) at debug level, errors at
// error level.
type pebbleLogger struct{ log zerolog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	if e := l.log.Debug(); e.Enabled() {
		e.Str(logComponent, "pebble").Msg(strings.TrimSpace(fmt.Sprintf(format, args...)))
	}
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error().Str(logComponent, "pebble").Msg(strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// Fatalf logs and panics: Pebble calls it on unrecoverable corruption and
// does not expect it to return.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, args...))
	l.log.Error().Str(logComponent, "pebble").Msg(msg)
	panic("pebble: " + msg)
}

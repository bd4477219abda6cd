package statestore

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Log field names.
const (
	logComponent  = "component" // the library a message comes from
	logSuppressed = "suppressed"
	logDir        = "dir"
)

// logEvery is the least time between two log lines of one kind of trouble;
// the next line counts the ones left out (field "suppressed").
const logEvery = 10 * time.Second

// pebbleLogger routes Pebble's messages to zerolog: its chatty informational
// messages (flushes, compactions, WAL recycling) at debug level, errors at
// error level, at most one a logEvery per kind.
type pebbleLogger struct {
	log zerolog.Logger
	h   *health
}

func (l pebbleLogger) Infof(format string, args ...any) {
	if e := l.log.Debug(); e.Enabled() {
		e.Str(logComponent, "pebble").Msg(strings.TrimSpace(fmt.Sprintf(format, args...)))
	}
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, args...))
	if e, n, ok := l.h.limit.allow(l.log.Error(), msg); ok {
		e.Str(logComponent, "pebble").Int(logSuppressed, n).Msg(msg)
	}
}

// Fatalf fails the store and panics: Pebble calls it when it cannot go on
// and does not expect it to return. The store's own calls into Pebble
// recover the panic (health.guard); in one of Pebble's background jobs it
// ends the process, as Pebble intends.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	err := fmt.Errorf("%w: pebble: %s", ErrFailed, strings.TrimSpace(fmt.Sprintf(format, args...)))
	l.h.fatal(err)
	panic(fatalError{err})
}

// logLimiter lets one log line of each kind through per interval and
// counts the others. A kind is a message with its digits left out, so that
// the same failure on another file is the same kind.
type logLimiter struct {
	every time.Duration

	mu    sync.Mutex
	kinds map[string]*logKind
}

type logKind struct {
	last       time.Time
	suppressed int
}

// maxLogKinds bounds the kinds a logLimiter remembers.
const maxLogKinds = 64

func newLogLimiter(every time.Duration) *logLimiter {
	return &logLimiter{every: every, kinds: map[string]*logKind{}}
}

// allow returns e and how many lines of msg's kind were left out since the
// last one, with ok true when this line may be logged. When it may not, e
// is discarded.
func (l *logLimiter) allow(e *zerolog.Event, msg string) (_ *zerolog.Event, suppressed int, ok bool) {
	kind := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, msg)
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.kinds[kind]
	if k == nil {
		if len(l.kinds) >= maxLogKinds {
			clear(l.kinds)
		}
		k = &logKind{}
		l.kinds[kind] = k
	} else if now.Sub(k.last) < l.every {
		k.suppressed++
		e.Discard()
		return nil, 0, false
	}
	n := k.suppressed
	k.last, k.suppressed = now, 0
	return e, n, true
}

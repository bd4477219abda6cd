package natsembed

import (
	"fmt"
	"strings"

	"github.com/rs/zerolog"
)

// logComponent is the log field naming the library a message comes from.
const logComponent = "component"

// serverLogger implements the nats-server's Logger on zerolog. Notices (the
// startup banner, listen addresses) go to debug so the agent is quiet by
// default. The first fatal message is also handed to Start, since with a
// custom logger the server does not exit on it.
type serverLogger struct {
	log   zerolog.Logger
	fatal chan string
}

func (l *serverLogger) traceEnabled() bool { return l.log.GetLevel() <= zerolog.TraceLevel }

func (l *serverLogger) emit(e *zerolog.Event, format string, v []any) {
	if e.Enabled() {
		e.Str(logComponent, "nats-server").Msg(strings.TrimSpace(fmt.Sprintf(format, v...)))
	}
}

func (l *serverLogger) Noticef(format string, v ...any) { l.emit(l.log.Debug(), format, v) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.emit(l.log.Warn(), format, v) }
func (l *serverLogger) Errorf(format string, v ...any)  { l.emit(l.log.Error(), format, v) }
func (l *serverLogger) Debugf(format string, v ...any)  { l.emit(l.log.Trace(), format, v) }
func (l *serverLogger) Tracef(format string, v ...any)  { l.emit(l.log.Trace(), format, v) }

func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.emit(l.log.Error(), "%s", []any{msg})
	select {
	case l.fatal <- msg:
	default:
	}
}

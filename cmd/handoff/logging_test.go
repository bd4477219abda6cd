package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/handoffhq/handoff/internal/logtest"

	"github.com/handoffhq/handoff/internal/natstest"
)

func TestLogTimestampsHaveMicroseconds(t *testing.T) {
	t.Run("json", func(t *testing.T) {
		var buf bytes.Buffer
		before := time.Now().Truncate(time.Microsecond)
		log := newLogger(&buf, "info", "json", nil)
		child := log.With().Str("component", "test").Logger()
		child.Info().Msg("hello")
		after := time.Now()
		var line struct {
			Time string `json:"time"`
		}
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("log line %q: %v", buf.String(), err)
		}
		if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`).MatchString(line.Time) {
			t.Fatalf("time = %q, want RFC 3339 UTC with six decimals", line.Time)
		}
		at, err := time.Parse(logTimeJSON, line.Time)
		if err != nil {
			t.Fatal(err)
		}
		if at.Before(before) || at.After(after) {
			t.Errorf("time = %s, want between %s and %s", at, before, after)
		}
	})
	t.Run("console", func(t *testing.T) {
		var buf bytes.Buffer
		log := newLogger(&buf, "info", "console", nil)
		log.Info().Msg("hello")
		plain := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAll(buf.Bytes(), nil) // colours
		if !regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{6} INF hello`).Match(plain) {
			t.Errorf("console line %q, want it to start with the time of day to the microsecond", buf.String())
		}
	})
	t.Run("disabled level", func(t *testing.T) {
		var buf bytes.Buffer
		log := newLogger(&buf, "warn", "json", nil)
		log.Info().Msg("hidden")
		if buf.Len() != 0 {
			t.Errorf("an info line below level warn wrote %q", buf.String())
		}
	})
}

// The NATS client's asynchronous errors (which it writes raw to stderr
// unless given a handler) become log lines in the agent's format, on the
// embedded server's connection and on one to a NATS URL alike.
func TestNATSClientErrorsAreLogLines(t *testing.T) {
	srv := natstest.Start(t)
	for _, c := range []struct {
		name string
		nats string
	}{{"embedded", ""}, {"url", srv.URL}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.DataDir, cfg.MemberID = t.TempDir(), "m1"
			cfg.NATS.URL, cfg.NATS.EmbeddedListen = c.nats, "127.0.0.1:0"
			var buf logtest.Buffer
			nc, stop, err := dialOrEmbed(cfg, newLogger(&buf, "info", "json", nil))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			nc.Opts.AsyncErrorCB(nc, nil, errors.New("nats: consumer not active"))
			var found bool
			for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				var line map[string]any
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					t.Fatalf("log line %q is not JSON: %v", l, err)
				}
				found = found || (line["message"] == "NATS client error" && line["error"] == "nats: consumer not active")
			}
			if !found {
				t.Fatalf("no JSON line for the NATS client's error; log:\n%s", buf.String())
			}
		})
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"
	"time"
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

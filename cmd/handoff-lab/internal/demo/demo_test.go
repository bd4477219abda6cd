package demo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/internal/watchbuf"
)

// demoArgs are small sizes and a fast timeline.
// demoArgs run the workers without their cache, so that the report's exact
// counts check the worker that keeps its state in the sidecar only.
var demoArgs = []string{"--tasks", "4", "--stateless", "2", "--members", "2", "--rate", "100",
	"--history", "500", "--value-size", "64", "--hold", "200ms", "--timeout", "1m", "--worker-cache=false"}

var dataDirLine = regexp.MustCompile(`data in (\S+)`)

// TestDemo runs the demo with small sizes and checks its report: tasks
// moved, the counts are exact, and nothing is left behind.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a group of agents")
	}
	before := runtime.NumGoroutine()
	var out watchbuf.Buffer
	e := Env{Stdout: &out, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := Run(ctx, demoArgs, e); err != nil {
		t.Fatalf("handoff-lab demo: %v\n%s", err, out.String())
	}
	got := out.String()
	if !strings.Contains(got, "counts         exact:") {
		t.Errorf("the report does not say the counts are exact:\n%s", got)
	}
	m := regexp.MustCompile(`moves +(\d+) hand-offs: (\d+) stateful`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("no moves line in the report:\n%s", got)
	}
	if n, _ := strconv.Atoi(m[2]); n == 0 {
		t.Errorf("the report counts no stateful move: %q", m[0])
	}
	d := regexp.MustCompile(`direct +(\d+) of the (\d+) hand-offs`).FindStringSubmatch(got)
	if d == nil {
		t.Fatalf("no direct hand-offs line in the report:\n%s", got)
	}
	if n, _ := strconv.Atoi(d[1]); n == 0 || d[2] != m[1] {
		t.Errorf("the report says %q with %s hand-offs in all: want some taken over directly, of the same count", d[0], m[1])
	}
	for _, want := range []string{"m3 started", "learner", "moved", "m1 leaving (POST /leave)", "m1 handed everything over", "pauses ", "spikes "} {
		if !strings.Contains(got, want) {
			t.Errorf("the output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\033[") {
		t.Errorf("the output has ANSI escapes although it is not a terminal")
	}
	checkCleanedUp(t, got, before)
}

// TestDemoInterrupted cancels the demo in the middle of its scale-up, as
// Ctrl-C does: it stops cleanly and leaves nothing behind.
func TestDemoInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a group of agents")
	}
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var once sync.Once
	out := &watchbuf.Buffer{OnWrite: func(s string) {
		if strings.Contains(s, "m3 started") {
			once.Do(cancel)
		}
	}}
	e := Env{Stdout: out, Getenv: func(string) string { return "" }}
	if err := Run(ctx, demoArgs, e); err != nil {
		t.Fatalf("interrupted demo = %v, want nil\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "interrupted") {
		t.Errorf("the interrupted demo does not say so:\n%s", out.String())
	}
	checkCleanedUp(t, out.String(), before)
}

// checkCleanedUp checks that the demo's data directory is gone and its
// goroutines have ended.
func checkCleanedUp(t *testing.T, out string, before int) {
	t.Helper()
	m := dataDirLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the output does not name the data directory:\n%s", out)
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("data directory %s still exists (stat: %v)", m[1], err)
	}
	// Idle HTTP connections and NATS readers end shortly after Close.
	poll.Eventually(t, 10*time.Second, "the demo's goroutines to end", func() error {
		if n := runtime.NumGoroutine(); n > before+2 {
			var b bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
			return fmt.Errorf("%d goroutines left, %d before the demo:\n%s", n, before, b.String())
		}
		return nil
	})
}

func TestParseDemo(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     string
		wantErr bool
		check   func(settings) bool
	}{
		{name: "defaults", check: func(s settings) bool { return s.tasks == 12 && s.members == 3 && s.handover == "eager" }},
		{name: "stable", args: []string{"--handover", "stable"}, check: func(s settings) bool { return s.handover == "stable" }},
		{name: "defaults cache", check: func(s settings) bool { return s.workerCache }},
		{name: "no worker cache", args: []string{"--worker-cache=false"}, check: func(s settings) bool { return !s.workerCache }},
		{name: "NO_COLOR", env: "1", check: func(s settings) bool { return s.noColor }},
		{name: "unknown mode", args: []string{"--handover", "cold"}, wantErr: true},
		{name: "one member", args: []string{"--members", "1"}, wantErr: true},
		{name: "no tasks", args: []string{"--tasks", "0"}, wantErr: true},
		{name: "stray argument", args: []string{"now"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			s, err := parse(tt.args, &out, func(string) string { return tt.env })
			if (err != nil) != tt.wantErr {
				t.Fatalf("parse(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			}
			if err == nil && tt.check != nil && !tt.check(s) {
				t.Errorf("parse(%q) = %+v", tt.args, s)
			}
		})
	}
}

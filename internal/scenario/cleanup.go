package scenario

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// cleanup logs the tails of the logs and has every running agent and
// worker dump its goroutines if the test failed, then kills every process
// (workers first, so that none sees its agent vanish and logs noise) and
// closes the harness's connection.
func (h *Harness) cleanup() {
	if h.Gen != nil {
		h.Gen.Abort()
	}
	if h.t.Failed() {
		h.dumpLogs()
		h.dumpGoroutines()
	}
	var errs []error
	for _, m := range h.Members() {
		errs = append(errs, m.Worker.Kill(), m.Agent.Kill())
	}
	for _, n := range h.NATS {
		errs = append(errs, n.Proc.Kill())
	}
	if err := errors.Join(errs...); err != nil {
		h.t.Errorf("cleanup: %v", err)
	}
	if h.progress != nil && h.progress.stop != nil {
		h.progress.stop()
	}
	if h.nc != nil {
		h.nc.Close()
	}
}

// dumpGoroutines makes every running agent and worker print its
// goroutines into its log (SIGQUIT; SIGCONT first, in case it is paused)
// and exit: the evidence for a hang.
func (h *Harness) dumpGoroutines() {
	for _, m := range h.Members() {
		for _, p := range []*Process{m.Agent, m.Worker} {
			if !p.Running() {
				continue
			}
			_ = p.Signal(syscall.SIGCONT)
			if p.Signal(syscall.SIGQUIT) == nil && p.Wait(5*time.Second) == nil {
				h.t.Logf("%s was running; its goroutines are at the end of %s", p.Name, p.LogPath)
			}
		}
	}
}

// dumpLogs logs the last lines of every process's log and event file.
func (h *Harness) dumpLogs() {
	var paths []string
	for _, n := range h.NATS {
		paths = append(paths, n.Proc.LogPath)
	}
	for _, m := range h.Members() {
		paths = append(paths, m.Agent.LogPath, m.Worker.LogPath, filepath.Join(m.Dir, "events.jsonl"))
	}
	sort.Strings(paths)
	for _, p := range paths {
		h.t.Logf("--- last lines of %s:\n%s", p, tail(p, 40))
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

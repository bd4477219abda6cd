package conformance

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Environment variables the worker under test gets, besides the
// conformance run's own environment.
const (
	EnvSidecarURL   = "SIDECAR_URL"   // the agent's API (through the recording proxy)
	EnvSidecarToken = "SIDECAR_TOKEN" // the API token: send "Authorization: Bearer <token>"
	EnvNATSURL      = "NATS_URL"      // the NATS server with the conformance job's input stream
	EnvGroup        = "HANDOFF_GROUP" // the group: input subjects are input.<group>.<task>
	EnvTasks        = "HANDOFF_TASKS" // the group's stateful tasks, as a range: c-0..3
)

// process is a worker of the run: the worker under test, or the second
// member's.
type process struct {
	cmd     *exec.Cmd
	started time.Time
	logPath string
	done    chan struct{} // closed once it exited
	exited  time.Time
	err     error // its exit error (nil: status 0)
}

// startWorker starts argv with env added to the environment, its output
// going to the file logPath.
func startWorker(argv []string, env []string, logPath string) (*process, error) {
	if len(argv) == 0 {
		return nil, errors.New("no worker command: give it after --, such as: handoff conformance -- python3 examples/python/worker.py")
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create the worker's log: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	setProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start the worker %q: %w", strings.Join(argv, " "), err)
	}
	p := &process{cmd: cmd, started: time.Now(), logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		p.exited = time.Now()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// running reports whether the worker has not exited yet.
func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill stops the worker and what it started, and waits for the worker. A
// worker that exited may have left a child running (a shell's background
// job): its process group is killed all the same.
func (p *process) kill() {
	killProcessGroup(p.cmd)
	<-p.done
}

// status describes how the worker ended.
func (p *process) status() string {
	if p.running() {
		return "still running"
	}
	if p.err == nil {
		return "exited with status 0"
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return "exited: " + ee.String()
	}
	return "ended: " + p.err.Error()
}

// tail returns the last n lines of the worker's output.
func (p *process) tail(n int) []string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

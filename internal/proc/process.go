package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is one OS process of a multi-process run, restartable with the same
// command line. It runs in its own process group, so signals reach it and
// nothing else, and it dies with the process that started it (Pdeathsig) even if
// that one is killed before its cleanups run. Its stdout and stderr are
// appended to LogPath across restarts. Methods are safe for concurrent use.
type Process struct {
	Name    string
	Path    string
	Args    []string
	LogPath string
	// Env is added to the parent's environment.
	Env []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current run has been reaped
	waitErr error
	starts  int
}

// Start starts the process; it fails if it is already running.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.done) {
		return fmt.Errorf("start %s: already running as pid %d", p.Name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p.Name, err)
	}
	fmt.Fprintf(logf, "=== start %d of %s at %s: %s %v\n", p.starts+1, p.Name, time.Now().Format(time.RFC3339Nano), p.Path, p.Args)
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.starts++
	p.cmd = cmd
	done := make(chan struct{})
	p.done = done
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Running reports whether the process has been started and not reaped.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !closed(p.done)
}

// Exited returns a channel closed when the current run has ended (a closed
// one if the process never started).
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return p.done
}

// ExitErr is the result of the last run's Wait (nil for exit status 0).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// Signal sends sig to the process's group, if it runs.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || closed(p.done) {
		return fmt.Errorf("signal %s to %s: not running", sig, p.Name)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s to %s (pgid %d): %w", sig, p.Name, p.cmd.Process.Pid, err)
	}
	return nil
}

// Kill sends SIGKILL to the process group and waits until it is reaped. A
// stopped (SIGSTOP) process dies too. Killing a process that does not run
// does nothing.
func (p *Process) Kill() error {
	if !p.Running() {
		return nil
	}
	if err := p.Signal(syscall.SIGKILL); err != nil && p.Running() {
		return err
	}
	return p.Wait(30 * time.Second)
}

// Pause stops the process (SIGSTOP), as a hung VM or a long GC pause would.
func (p *Process) Pause() error { return p.Signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (p *Process) Resume() error { return p.Signal(syscall.SIGCONT) }

// Terminate asks the process to exit (SIGTERM) without waiting.
func (p *Process) Terminate() error { return p.Signal(syscall.SIGTERM) }

// Wait waits until the current run ends, at most timeout.
func (p *Process) Wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.Exited():
		return nil
	case <-t.C:
		return fmt.Errorf("%s did not exit within %s", p.Name, timeout)
	}
}

// Pid is the pid of the current run, or 0.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

package scenario

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestProcessLifecycle runs a real child process through the harness's
// controls: pause, resume, terminate, restart, and a kill while paused.
func TestProcessLifecycle(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	p := &Process{Name: "sleeper", Path: sleep, Args: []string{"60"}, LogPath: filepath.Join(t.TempDir(), "sleep.log")}
	t.Cleanup(func() { _ = p.Kill() })
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err == nil {
		t.Errorf("a second Start while running = nil, want an error")
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Running() || p.ExitErr() == nil {
		t.Errorf("after SIGTERM: running %v, exit %v; want exited by the signal", p.Running(), p.ExitErr())
	}
	if err := p.Signal(syscall.SIGTERM); err == nil {
		t.Errorf("Signal to an exited process = nil, want an error")
	}

	if err := p.Start(); err != nil { // a restart
		t.Fatalf("restart: %v", err)
	}
	pid := p.Pid()
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil { // SIGKILL ends a stopped process too
		t.Fatal(err)
	}
	if p.Running() {
		t.Errorf("still running after Kill")
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("process %d still exists after Kill", pid)
	}
	if log := tail(p.LogPath, 10); len(log) == 0 {
		t.Errorf("no log written")
	}
}

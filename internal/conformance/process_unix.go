//go:build unix

package conformance

import (
	"os/exec"
	"syscall"
)

// setProcessGroup starts the worker in a process group of its own, so that
// a worker started through a shell is stopped with its children.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

func killProcessGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

package proc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Binaries are the programs a multi-process run starts, built from this module.
type Binaries struct {
	Handoff    string // ./cmd/handoff
	Lab        string // ./cmd/handoff-lab (the bench's floor process)
	Counter    string // ./examples/counter
	NATSServer string // github.com/nats-io/nats-server/v2 at go.mod's version
}

// buildPrefix names the temporary directories the binaries are built in.
const buildPrefix = "handoff-scenario-bin-"

var (
	buildOnce sync.Once
	buildDir  string
	built     Binaries
	buildErr  error
)

// Build builds the binaries once per process (without -race, even when the
// tests run with it: the processes are the system under test, not the
// test) into a temporary directory that RemoveBuilds deletes.
func Build() (Binaries, error) {
	buildOnce.Do(func() { built, buildErr = build() })
	return built, buildErr
}

// RemoveBuilds deletes what Build made; call it from TestMain after m.Run.
func RemoveBuilds() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

func build() (Binaries, error) {
	root, err := moduleRoot()
	if err != nil {
		return Binaries{}, err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return Binaries{}, fmt.Errorf("find the go command to build the binaries of a multi-process run: %w", err)
	}
	removeStaleBuilds()
	buildDir, err = os.MkdirTemp("", buildPrefix)
	if err != nil {
		return Binaries{}, fmt.Errorf("create build directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(buildDir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return Binaries{}, fmt.Errorf("write build directory's owner: %w", err)
	}
	// One invocation builds the three main packages into the directory,
	// each named after its package path.
	cmd := exec.Command(goBin, "build", "-o", buildDir+string(filepath.Separator),
		"./cmd/handoff", "./cmd/handoff-lab", "./examples/counter", "github.com/nats-io/nats-server/v2")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return Binaries{}, fmt.Errorf("go build the binaries of a multi-process run in %s: %w\n%s", root, err, out.String())
	}
	b := Binaries{
		Handoff:    filepath.Join(buildDir, "handoff"),
		Lab:        filepath.Join(buildDir, "handoff-lab"),
		Counter:    filepath.Join(buildDir, "counter"),
		NATSServer: filepath.Join(buildDir, "nats-server"),
	}
	for _, p := range []string{b.Handoff, b.Lab, b.Counter, b.NATSServer} {
		if _, err := os.Stat(p); err != nil {
			return Binaries{}, fmt.Errorf("go build did not produce %s: %w", p, err)
		}
	}
	return b, nil
}

// moduleRoot finds the directory of this module's go.mod from the working
// directory (a test runs in its package's directory).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module (go env GOMOD = %q)", mod)
	}
	return filepath.Dir(mod), nil
}

// removeStaleBuilds deletes the build directories of test processes that
// are gone without removing theirs (a test binary killed by -timeout runs no
// cleanup).
func removeStaleBuilds() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), buildPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			continue // being created, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

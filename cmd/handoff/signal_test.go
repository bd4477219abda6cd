package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/natsembed"
	"github.com/handoffhq/handoff/internal/natstest"
)

// envRunMain makes the test binary run main() instead of the tests, so that
// a test can run the real handoff binary, signal handling included, as a
// child process without building it.
const envRunMain = "GO_TEST_HANDOFF_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Deadlines of the process tests: generous, as a bound for a failure, not a
// measure of speed (race-enabled children start slowly on a busy machine).
const (
	startDeadline = 60 * time.Second
	exitDeadline  = 30 * time.Second
)

// agentProc is 'handoff agent' running in a child process.
type agentProc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	api    string // host:port of the worker API
	exited chan struct{}
	err    error // cmd.Wait's result, once exited is closed

	mu      sync.Mutex
	lines   []map[string]any // the JSON log lines so far
	raw     []string
	changed chan struct{} // closed and replaced on each new line
}

// startAgent runs 'handoff agent args...' with JSON logs and an environment
// holding no HANDOFF_* variables but env, and waits until its API listens.
func startAgent(t *testing.T, name string, env []string, args ...string) *agentProc {
	t.Helper()
	p := spawnAgent(t, name, env, args...)
	started := p.waitLog("agent started", startDeadline)
	p.api, _ = started["api"].(string)
	if p.api == "" {
		t.Fatalf("%s logged %v: no api address", name, started)
	}
	return p
}

// spawnAgent is startAgent without the wait.
func spawnAgent(t *testing.T, name string, env []string, args ...string) *agentProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"agent", "--log-format", "json"}, args...)...)
	cmd.Env = []string{envRunMain + "=1", "PATH=" + os.Getenv("PATH")}
	for _, k := range []string{"TMPDIR", "GORACE", "GOCOVERDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &agentProc{t: t, name: name, cmd: cmd, exited: make(chan struct{}), changed: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.addLine(sc.Text())
		}
		p.err = cmd.Wait() // after the last read, as StderrPipe requires
		close(p.exited)
		p.addLine("") // wake waiters
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, p.output())
		}
	})
	return p
}

func (p *agentProc) addLine(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s != "" {
		p.raw = append(p.raw, s)
		var m map[string]any
		if json.Unmarshal([]byte(s), &m) == nil {
			p.lines = append(p.lines, m)
		}
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// waitLog waits for a log line whose message starts with msg and returns it.
func (p *agentProc) waitLog(msg string, d time.Duration) map[string]any {
	p.t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		if l, ok := p.find(msg); ok {
			return l
		}
		select {
		case <-changed:
		case <-p.exited:
			if l, ok := p.find(msg); ok { // logged just before the exit
				return l
			}
			p.t.Fatalf("%s exited (%v) before logging %q", p.name, p.err, msg)
		case <-deadline.C:
			p.t.Fatalf("%s logged no %q within %s", p.name, msg, d)
		}
	}
}

// find returns the first log line whose message starts with msg.
func (p *agentProc) find(msg string) (map[string]any, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if m, _ := l["message"].(string); strings.HasPrefix(m, msg) {
			return l, true
		}
	}
	return nil, false
}

// output is everything the process wrote to stderr so far.
func (p *agentProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.raw, "\n")
}

// logged reports whether a line whose message starts with msg was logged.
func (p *agentProc) logged(msg string) bool {
	_, ok := p.find(msg)
	return ok
}

func (p *agentProc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %s to %s: %v", sig, p.name, err)
	}
}

// waitExit waits at most d for the process to exit and returns its status.
func (p *agentProc) waitExit(d time.Duration) int {
	p.t.Helper()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.t.Fatalf("%s has not exited %s after the signal", p.name, d)
	}
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		p.t.Fatalf("%s: %v", p.name, p.err)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *agentProc) url(path string) string { return "http://" + p.api + path }

// apiURL is an agent's API address (host:port, or unix:PATH) as a client
// takes it.
func apiURL(addr string) string {
	if _, socket := api.SocketPath(addr); socket {
		return addr
	}
	return "http://" + addr
}

// getJSON GETs path of p's API, on TCP or its Unix socket, into out.
func (p *agentProc) getJSON(path string, out any) {
	p.t.Helper()
	if _, socket := api.SocketPath(p.api); !socket {
		getJSON(p.t, p.url(path), out)
		return
	}
	hc := &http.Client{Transport: client.NewTransport(p.api)}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://localhost" + path)
	if err != nil {
		p.t.Fatalf("GET %s on %s: %v", path, p.api, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		p.t.Fatalf("GET %s on %s: status %d", path, p.api, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		p.t.Fatalf("GET %s on %s: %v", path, p.api, err)
	}
}

// view long-polls p's /assignment past version after.
func (p *agentProc) view(after uint64) api.View {
	p.t.Helper()
	var v api.View
	p.getJSON(fmt.Sprintf("/assignment?wait=10s&after=%d", after), &v)
	return v
}

// waitView follows p's /assignment until ok holds for a view, at most d.
func (p *agentProc) waitView(d time.Duration, what string, ok func(api.View) bool) api.View {
	p.t.Helper()
	deadline := time.Now().Add(d)
	v := p.view(0)
	for !ok(v) {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: no view with %s within %s; last: %+v", p.name, what, d, v)
		}
		v = p.view(v.Version)
	}
	return v
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func isMember(v api.View) bool { return v.State == api.StateMember }

// TestSignalLeavesThenExits runs the agent with its embedded NATS server and
// a worker, and signals it once: the API must stay up through the leave
// until the worker is told to shut down, the agent must then exit 0 on its
// own, and its member record must be gone from the group's bucket.
func TestSignalLeavesThenExits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent as a child process")
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			a := startAgent(t, "m1", nil,
				"--group", "sig", "--member-id", "m1", "--data-dir", dir,
				"--listen", "127.0.0.1:0", "--embedded-nats-listen", "127.0.0.1:0",
				"--tasks", "orders-0..3", "--stateless-tasks", "enrich-0",
				// A record that outlives the test: only a delete removes it.
				"--session-timeout", "5m")
			w := startWorker(t, a.api)
			a.waitView(startDeadline, "state member and 5 active tasks", func(v api.View) bool {
				return isMember(v) && activeCount(v) == 5
			})
			natsURL, _ := a.waitLog("embedded NATS server started", startDeadline)["url"].(string)
			if _, err := memberRecord(t, natsURL, "sig", "m1"); err != nil {
				t.Fatalf("member record of a running agent: %v", err)
			}

			a.signal(sig)
			// The worker releases its tasks and learns that it may exit
			// through the API, which stays up meanwhile.
			w.waitShutdown(t)
			if code := a.waitExit(exitDeadline); code != 0 {
				t.Fatalf("exit status after %s = %d, want 0", sig, code)
			}
			if !a.logged("left the group") {
				t.Errorf("the agent exited without logging 'left the group'")
			}

			// The embedded server's store is in the data directory: start it
			// again (its lock must have been released) and look.
			srv, err := natsembed.Start(natsembed.Options{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0", Logger: zerolog.Nop()})
			if err != nil {
				t.Fatalf("restart the embedded NATS on the agent's data: %v", err)
			}
			defer srv.Shutdown()
			if e, err := memberRecord(t, srv.ClientURL(), "sig", "m1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Errorf("member record after exit: %v, %v; want it deleted", e, err)
			}
		})
	}
}

// memberRecord reads a member's record from its group's bucket.
func memberRecord(t *testing.T, natsURL, groupName, member string) (jetstream.KeyValueEntry, error) {
	t.Helper()
	nc, err := natsgo.Connect(natsURL)
	if err != nil {
		t.Fatalf("connect to %s: %v", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, group.BucketName(groupName))
	if err != nil {
		t.Fatalf("open group %s's bucket: %v", groupName, err)
	}
	return kv.Get(ctx, "members."+member)
}

// TestSecondSignalExitsAtOnce signals an agent whose leave cannot finish (no
// worker releases its tasks, and the release timeout is long), then signals
// it again: it must exit at once with status 130.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs agents as child processes")
	}
	ns := natstest.Start(t)
	common := []string{"--group", "stuck", "--nats", ns.URL, "--listen", "127.0.0.1:0",
		"--tasks", "orders-0..3", "--release-timeout", "10m", "--leave-timeout", "10m"}
	m1 := startAgent(t, "m1", nil, append(common, "--member-id", "m1", "--data-dir", t.TempDir())...)
	m1.waitView(startDeadline, "state member", isMember)
	m2 := startAgent(t, "m2", nil, append(common, "--member-id", "m2", "--data-dir", t.TempDir())...)
	m2.waitView(startDeadline, "state member", isMember)

	m1.signal(syscall.SIGTERM)
	m1.waitLog("leaving: handing tasks over", exitDeadline)
	// The leave that makes no progress says, every few seconds, what it
	// waits for and how long it will still wait.
	still := m1.waitLog("leaving: still waiting", exitDeadline)
	if m1.logged("left the group") {
		t.Fatal("m1 left the group although no worker released its tasks; the test needs a leave that lasts")
	}
	waiting, _ := still["waitingFor"].(string)
	givesUpIn, _ := still["givesUpIn"].(float64) // milliseconds
	if !strings.Contains(waiting, "the worker to release orders-") || givesUpIn <= 0 || givesUpIn > (10*time.Minute+15*time.Second).Seconds()*1000 {
		t.Errorf("the leave in progress logged %v: want it waiting for the worker to release m1's tasks, and giving up within the leave timeout", still)
	}
	m1.signal(syscall.SIGTERM)
	if code := m1.waitExit(exitDeadline); code != 130 {
		t.Fatalf("exit status after a second SIGTERM = %d, want 130", code)
	}
	if !strings.Contains(m1.output(), "second signal, exiting at once") {
		t.Errorf("m1 did not say it exits at once on the second signal")
	}
}

// worker runs client.Run against an agent, as the worker container would,
// with tasks that only wait to be stopped.
type worker struct {
	shutdown chan struct{} // closed on EventShutdown
	done     chan error
}

// waitShutdown waits until the agent has told the worker to shut down.
func (w *worker) waitShutdown(t *testing.T) {
	t.Helper()
	deadline := time.NewTimer(exitDeadline)
	defer deadline.Stop()
	select {
	case <-w.shutdown:
	case <-deadline.C:
		t.Fatalf("the worker was not told to shut down within %s", exitDeadline)
	}
}

func startWorker(t *testing.T, api string) *worker {
	t.Helper()
	w := &worker{shutdown: make(chan struct{}), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	go func() {
		w.done <- client.Run(ctx, client.New(apiURL(api)), func(ctx context.Context, _ client.Task) error {
			<-ctx.Done()
			return nil
		}, client.RunOptions{Logger: zerolog.Nop(), OnEvent: func(ev client.Event) {
			if ev.Type == client.EventShutdown {
				once.Do(func() { close(w.shutdown) })
			}
		}})
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	return w
}

func activeCount(v api.View) int {
	n := 0
	for _, task := range v.Tasks {
		if task.Role == api.RoleActive {
			n++
		}
	}
	return n
}

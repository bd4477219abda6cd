package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/internal/disktest"
	"github.com/handoffhq/handoff/internal/poll"
)

// commitHTTP commits one 8 KiB value to task at epoch and returns the
// status and error code.
func commitHTTP(t *testing.T, addr, task string, epoch uint64, i int) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"epoch":      epoch,
		"checkpoint": base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%d", i)),
		"puts": []map[string]string{{
			"key":   base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "k%d", i%50)),
			"value": base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{'v'}, 8<<10)),
		}},
	})
	resp, err := http.Post("http://"+addr+"/tasks/"+task+"/commit", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("commit %d: %v (the agent died?)", i, err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	return resp.StatusCode, eb.Code
}

// TestFullDiskProcess fills the disk of a running agent's store (a small
// tmpfs): commits are refused with 503 and nothing crashes, readiness says
// so, writes resume once space is freed, and SIGTERM still works; a start
// on the full disk waits for space and answers SIGTERM.
func TestFullDiskProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent as a child process")
	}
	disk := disktest.Mount(t, "16m")
	dataDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(disk, "state"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Only the store is on the small disk; the embedded NATS is not.
	if err := os.Symlink(filepath.Join(disk, "state"), filepath.Join(dataDir, "state")); err != nil {
		t.Fatal(err)
	}
	args := []string{"--group", "disk", "--member-id", "m1", "--data-dir", dataDir,
		"--listen", "127.0.0.1:0", "--embedded-nats-listen", "127.0.0.1:0", "--tasks", "orders-0",
		"--store-min-free-mb", "4", "--release-timeout", "1s"}
	a := startAgent(t, "m1", nil, args...)
	v := a.waitView(startDeadline, "orders-0 active", func(v api.View) bool { return activeCount(v) == 1 })
	epoch := v.Tasks[0].Epoch
	readyz := func() int {
		resp, err := http.Get(a.url("/readyz"))
		if err != nil {
			t.Fatalf("readyz: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	i := 0
	commit := func(want func(status int) bool) func() error {
		return func() error {
			i++
			if s, code := commitHTTP(t, a.api, "orders-0", epoch, i); !want(s) {
				return fmt.Errorf("commit %d = %d %s", i, s, code)
			}
			return nil
		}
	}
	accepted := func(s int) bool { return s == http.StatusOK }
	poll.Eventually(t, startDeadline, "a first commit", commit(accepted))

	fill := disktest.Fill(t, disk)
	poll.Eventually(t, startDeadline, "commits refused", commit(func(s int) bool { return s != http.StatusOK }))
	for range 200 {
		i++
		if s, code := commitHTTP(t, a.api, "orders-0", epoch, i); s != http.StatusServiceUnavailable || code != api.CodeUnavailable {
			t.Fatalf("commit on a full disk = %d %s, want 503 %s", s, code, api.CodeUnavailable)
		}
	}
	if s := readyz(); s != http.StatusServiceUnavailable {
		t.Fatalf("readyz on a full disk = %d, want 503", s)
	}
	if n := strings.Count(a.output(), "local store: refusing writes"); n > 2 {
		t.Errorf("%d log lines for refused writes within seconds, want them rate-limited", n)
	}

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, startDeadline, "commits to resume", commit(accepted))
	if s := readyz(); s != http.StatusOK {
		t.Fatalf("readyz after space returned = %d, want 200", s)
	}
	a.signal(syscall.SIGTERM)
	if code := a.waitExit(exitDeadline); code != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0", code)
	}

	// A start on the full disk waits for space, and SIGTERM ends the wait
	// as it cuts any start short; without a reserve too, as opening the
	// store needs room to flush what its WAL files hold (Pebble would
	// retry that flush for ever).
	fill = disktest.Fill(t, disk)
	noReserve := slices.Clone(args)
	noReserve[slices.Index(noReserve, "--store-min-free-mb")+1] = "0"
	for _, c := range []struct {
		name string
		args []string
	}{{"m1 on a full disk", args}, {"m1 on a full disk without a reserve", noReserve}} {
		b := spawnAgent(t, c.name, nil, c.args...)
		b.waitLog("local store: waiting for free space", startDeadline)
		b.signal(syscall.SIGTERM)
		// Nothing failed: the signal cut the start short.
		if code := b.waitExit(exitDeadline); code != 0 || !b.logged("start cut short by the signal") {
			t.Fatalf("%s: exit status after SIGTERM while waiting for space = %d, want 0 and the start said to be cut short", c.name, code)
		}
	}
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	c := startAgent(t, "m1 restarted", nil, args...)
	c.waitView(startDeadline, "orders-0 active again", func(v api.View) bool { return activeCount(v) == 1 })
}

// TestCorruptStoreReadProcess corrupts an sstable of a running agent's
// store: the read that meets it is answered 503 unavailable at once (not
// 500), and the agent exits with status 1 and a message that names the
// corruption and says what the next start does.
func TestCorruptStoreReadProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent as a child process")
	}
	dataDir := t.TempDir()
	args := []string{"--group", "corrupt", "--member-id", "m1", "--data-dir", dataDir,
		"--listen", "127.0.0.1:0", "--embedded-nats-listen", "127.0.0.1:0", "--tasks", "orders-0",
		"--require-worker=false", "--snapshots=false", "--release-timeout", "1s"}
	a := startAgent(t, "m1", nil, args...)
	v := a.waitView(startDeadline, "orders-0 active", func(v api.View) bool { return activeCount(v) == 1 })
	puts := make([]map[string]string, 2000)
	for i := range puts {
		val := make([]byte, 200)
		_, _ = rand.Read(val) // incompressible, so that the data spans many blocks
		puts[i] = map[string]string{
			"key":   base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "k%05d", i)),
			"value": base64.StdEncoding.EncodeToString(val),
		}
	}
	body, _ := json.Marshal(map[string]any{"epoch": v.Tasks[0].Epoch, "puts": puts})
	resp, err := http.Post(a.url("/tasks/orders-0/commit"), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("commit = %d, want 200", resp.StatusCode)
	}
	a.signal(syscall.SIGTERM)
	if code := a.waitExit(exitDeadline); code != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0", code)
	}

	// The next start flushes what the WAL holds into an sstable, which is
	// then damaged under the running agent.
	b := startAgent(t, "m1 restarted", nil, args...)
	b.waitView(startDeadline, "orders-0 active again", func(v api.View) bool { return activeCount(v) == 1 })
	ssts, _ := filepath.Glob(filepath.Join(dataDir, "state", "*.sst"))
	if len(ssts) != 1 {
		t.Fatalf("%d sstables after a restart, want 1", len(ssts))
	}
	sst, err := os.ReadFile(ssts[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := len(sst) / 4; i < len(sst)/4+64; i++ {
		sst[i] ^= 0xff
	}
	f, err := os.OpenFile(ssts[0], os.O_WRONLY, 0) // in place: the agent has it open
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(sst, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()

	resp, err = http.Get(b.url("/tasks/orders-0/state?limit=2000"))
	if err != nil {
		t.Fatalf("scan over the corrupt sstable: %v", err)
	}
	var eb api.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || eb.Code != api.CodeUnavailable {
		t.Fatalf("scan over a corrupt sstable = %d %s (%s), want 503 %s", resp.StatusCode, eb.Code, eb.Message, api.CodeUnavailable)
	}
	if code := b.waitExit(exitDeadline); code != 1 {
		t.Fatalf("exit status after the store found corruption = %d, want 1", code)
	}
	out := b.output()
	if !strings.Contains(out, "the local store is corrupt") || !strings.Contains(out, "moves the store aside") || strings.Contains(out, "free space") {
		t.Fatalf("exit message does not name the corruption and the rebuild:\n%s", out)
	}
}

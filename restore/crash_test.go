package restore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/statestore"
)

// Environment of the crash helper process.
const (
	crashStoreEnv = "RESTORE_TEST_CRASH_STORE"
	crashURLEnv   = "RESTORE_TEST_CRASH_NATS"
	crashSyncEnv  = "RESTORE_TEST_CRASH_SYNC"
	crashCommits  = 5 // applied before the commit that is appended only
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashStoreEnv); dir != "" {
		if err := crashHelper(dir, os.Getenv(crashURLEnv), os.Getenv(crashSyncEnv) != ""); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		return // not reached: the parent kills us
	}
	os.Exit(m.Run())
}

// crashHelper commits crashCommits entries (append, then apply), appends
// one more, says so on stdout and waits to be killed before applying it.
func crashHelper(dir, url string, sync bool) error {
	ctx := context.Background()
	store, err := statestore.Open(dir, statestore.Options{Sync: sync, Logger: zerolog.Nop()})
	if err != nil {
		return err
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	l, err := changelog.Open(ctx, js, changelog.Options{Group: "g"})
	if err != nil {
		return err
	}
	var last uint64
	for i := range crashCommits + 1 {
		seq, err := l.Append(ctx, "t", last, entry(i))
		if err != nil {
			return err
		}
		if i == crashCommits {
			fmt.Printf("appended %d\n", seq)
			select {} // killed here, between append and apply
		}
		if err := store.Apply("t", restore.Commit(entry(i), seq)); err != nil {
			return err
		}
		last = seq
	}
	return nil
}

func modelOf(entries ...changelog.Entry) map[string]string {
	m := map[string]string{}
	for _, e := range entries {
		for _, kv := range e.Puts {
			m[string(kv.Key)] = string(kv.Value)
		}
		for _, k := range e.Deletes {
			delete(m, string(k))
		}
	}
	return m
}

func dataOf(t *testing.T, s *statestore.Store, task string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, kv := range stateOf(t, s, task).data {
		m[string(kv.Key)] = string(kv.Value)
	}
	return m
}

// TestCrashBetweenAppendAndApply kills a writer after it appended a commit
// and before it applied it. With Sync, the store keeps every commit applied
// before; without, Pebble may lose a tail of them still in its WAL buffer
// (it writes unsynced commits out per 32 KiB block). Either way the store's
// data matches its applied sequence, and a restore brings in the rest.
func TestCrashBetweenAppendAndApply(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) { testCrash(t, sync) })
	}
}

func testCrash(t *testing.T, sync bool) {
	e := newEnv(t)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashStoreEnv+"="+dir, crashURLEnv+"="+e.srv.URL)
	if sync {
		cmd.Env = append(cmd.Env, crashSyncEnv+"=1")
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "appended ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper said %q, %v", line, err)
	}
	appended, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "appended ")), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("helper exit: %v, want killed", err)
	}
	// The helper was alone on a fresh stream: entry i is at seq i+1.
	if appended != crashCommits+1 {
		t.Fatalf("helper appended at %d, want %d", appended, crashCommits+1)
	}

	store, err := statestore.Open(dir, statestore.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	defer store.Close()
	m, _, err := store.Meta("t")
	if err != nil {
		t.Fatal(err)
	}
	if m.Applied >= appended || (sync && m.Applied != crashCommits) {
		t.Fatalf("applied after kill = %d, want %s", m.Applied, map[bool]string{true: "5 (synced)", false: "below 6"}[sync])
	}
	var applied []changelog.Entry
	for i := range m.Applied {
		applied = append(applied, entry(int(i)))
	}
	if got, want := dataOf(t, store, "t"), modelOf(applied...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("data after kill at applied seq %d = %v, want %v", m.Applied, got, want)
	}

	// A restore brings in what the store lacks, up to the appended commit.
	if _, err := restore.New(e.log, store, restore.Options{Task: "t"}).Run(testContext(t)); err != nil {
		t.Fatal(err)
	}
	m, _, _ = store.Meta("t")
	if m.Applied != appended || string(m.Checkpoint) != "cp4" {
		t.Errorf("meta after restore = %+v, want applied %d, checkpoint cp4", m, appended)
	}
	var all []changelog.Entry
	for i := range crashCommits + 1 {
		all = append(all, entry(i))
	}
	if got, want := dataOf(t, store, "t"), modelOf(all...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("data after restore = %v, want %v", got, want)
	}
}

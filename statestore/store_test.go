package statestore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"
)

func openMem(t *testing.T) *Store {
	t.Helper()
	s, err := Open("db", Options{FS: vfs.NewMem(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func kv(k, v string) KV { return KV{Key: []byte(k), Value: []byte(v)} }

func mustApply(t *testing.T, s *Store, task string, cs ...Commit) {
	t.Helper()
	if err := s.Apply(task, cs...); err != nil {
		t.Fatalf("Apply(%q): %v", task, err)
	}
}

func mustGet(t *testing.T, s *Store, task, key string) string {
	t.Helper()
	v, err := s.Get(task, []byte(key))
	if err != nil {
		t.Fatalf("Get(%q, %q): %v", task, key, err)
	}
	return string(v)
}

func wantMeta(t *testing.T, s *Store, want Meta) {
	t.Helper()
	got, ok, err := s.Meta(want.Task)
	if err != nil || !ok {
		t.Fatalf("Meta(%q) = _, %v, %v, want ok", want.Task, ok, err)
	}
	if got.Applied != want.Applied || got.Epoch != want.Epoch || !bytes.Equal(got.Checkpoint, want.Checkpoint) {
		t.Fatalf("Meta(%q) = %+v, want %+v", want.Task, got, want)
	}
}

func TestApplyGetMeta(t *testing.T) {
	s := openMem(t)
	if _, ok, err := s.Meta("t"); ok || err != nil {
		t.Fatalf("Meta of unknown task = ok %v, err %v; want not ok", ok, err)
	}
	mustApply(t, s, "t",
		Commit{Seq: 3, Epoch: 1, Checkpoint: []byte("c1"), Puts: []KV{kv("a", "1"), kv("b", "2"), kv("c", "3")}},
		Commit{Seq: 7, Epoch: 1, Puts: []KV{kv("a", "1bis")}, Deletes: [][]byte{[]byte("b")}},
	)
	if got := mustGet(t, s, "t", "a"); got != "1bis" {
		t.Errorf("Get(a) = %q, want 1bis", got)
	}
	if _, err := s.Get("t", []byte("b")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(deleted b) err = %v, want ErrNotFound", err)
	}
	if _, err := s.Get("other", []byte("a")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(other task) err = %v, want ErrNotFound", err)
	}
	// An empty checkpoint keeps the previous one.
	wantMeta(t, s, Meta{Task: "t", Applied: 7, Epoch: 1, Checkpoint: []byte("c1")})

	mustApply(t, s, "t", Commit{Seq: 9, Epoch: 2, Checkpoint: []byte("c2")})
	wantMeta(t, s, Meta{Task: "t", Applied: 9, Epoch: 2, Checkpoint: []byte("c2")})

	// The store keeps its own copy of a checkpoint.
	cp := []byte("c3")
	mustApply(t, s, "t", Commit{Seq: 11, Epoch: 2, Checkpoint: cp})
	cp[1] = 'X'
	mustApply(t, s, "t", Commit{Seq: 12, Epoch: 2})
	wantMeta(t, s, Meta{Task: "t", Applied: 12, Epoch: 2, Checkpoint: []byte("c3")})
	mustApply(t, s, "t", Commit{Seq: 13, Epoch: 2, Checkpoint: cp}) // same length, other bytes
	wantMeta(t, s, Meta{Task: "t", Applied: 13, Epoch: 2, Checkpoint: []byte("cX")})

	// Returned values are copies.
	v, _ := s.Get("t", []byte("c"))
	v[0] = 'X'
	if got := mustGet(t, s, "t", "c"); got != "3" {
		t.Errorf("Get(c) after mutating a returned value = %q, want 3", got)
	}
	// An empty value is a value.
	mustApply(t, s, "t", Commit{Seq: 20, Puts: []KV{kv("e", "")}})
	if v, err := s.Get("t", []byte("e")); err != nil || v == nil || len(v) != 0 {
		t.Errorf("Get(e) = %q, %v, want empty non-nil value", v, err)
	}
}

func TestApplyIdempotent(t *testing.T) {
	s := openMem(t)
	mustApply(t, s, "t", Commit{Seq: 1, Puts: []KV{kv("k", "1")}}, Commit{Seq: 2, Puts: []KV{kv("k", "2")}})
	// Replaying 1..2 changes nothing; 3 is applied.
	mustApply(t, s, "t",
		Commit{Seq: 1, Puts: []KV{kv("k", "stale")}, Checkpoint: []byte("stale")},
		Commit{Seq: 2, Puts: []KV{kv("x", "stale")}},
		Commit{Seq: 3, Epoch: 4, Puts: []KV{kv("k", "3")}},
	)
	if got := mustGet(t, s, "t", "k"); got != "3" {
		t.Errorf("Get(k) = %q, want 3", got)
	}
	if _, err := s.Get("t", []byte("x")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(x) err = %v, want ErrNotFound (commit 2 replayed)", err)
	}
	wantMeta(t, s, Meta{Task: "t", Applied: 3, Epoch: 4})
	// Only already-applied commits: nothing happens.
	mustApply(t, s, "t", Commit{Seq: 2, Epoch: 9})
	wantMeta(t, s, Meta{Task: "t", Applied: 3, Epoch: 4})

	for name, cs := range map[string][]Commit{
		"zero seq":        {{Seq: 0}},
		"decreasing":      {{Seq: 5}, {Seq: 4}},
		"repeated":        {{Seq: 5}, {Seq: 5}},
		"late decreasing": {{Seq: 5}, {Seq: 6}, {Seq: 1}},
	} {
		if err := s.Apply("t", cs...); err == nil {
			t.Errorf("Apply(%s) = nil, want an error", name)
		}
	}
	wantMeta(t, s, Meta{Task: "t", Applied: 3, Epoch: 4})
	if err := s.Apply("", Commit{Seq: 1}); err == nil {
		t.Error("Apply to an empty task = nil, want an error")
	}
}

func TestTasksDoNotCollide(t *testing.T) {
	s := openMem(t)
	// Without a length prefix, ("a", "bx") and ("ab", "x") would be one key.
	mustApply(t, s, "a", Commit{Seq: 1, Puts: []KV{kv("bx", "from a")}})
	mustApply(t, s, "ab", Commit{Seq: 2, Puts: []KV{kv("x", "from ab")}})
	if got := mustGet(t, s, "a", "bx"); got != "from a" {
		t.Errorf("Get(a, bx) = %q", got)
	}
	if got := mustGet(t, s, "ab", "x"); got != "from ab" {
		t.Errorf("Get(ab, x) = %q", got)
	}
	kvs, err := s.Scan("a", ScanOptions{})
	if err != nil || len(kvs) != 1 {
		t.Fatalf("Scan(a) = %q, %v, want one key", kvs, err)
	}
	if err := s.Drop("a"); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "ab", "x"); got != "from ab" {
		t.Errorf("after Drop(a), Get(ab, x) = %q", got)
	}
}

func TestScan(t *testing.T) {
	s := openMem(t)
	var puts []KV
	for _, k := range []string{"b2", "a1", "b1", "c", "b10", "a2", "\xff", "\xff\xff"} {
		puts = append(puts, kv(k, "v"+k))
	}
	mustApply(t, s, "t", Commit{Seq: 1, Puts: puts})
	mustApply(t, s, "u", Commit{Seq: 2, Puts: []KV{kv("a0", "u")}})
	tests := []struct {
		name string
		o    ScanOptions
		want []string
	}{
		{"all", ScanOptions{}, []string{"a1", "a2", "b1", "b10", "b2", "c", "\xff", "\xff\xff"}},
		{"prefix", ScanOptions{Prefix: []byte("b")}, []string{"b1", "b10", "b2"}},
		{"prefix 0xff", ScanOptions{Prefix: []byte("\xff")}, []string{"\xff", "\xff\xff"}},
		{"start", ScanOptions{Start: []byte("b2")}, []string{"b2", "c", "\xff", "\xff\xff"}},
		{"start between", ScanOptions{Start: []byte("b11")}, []string{"b2", "c", "\xff", "\xff\xff"}},
		{"prefix and start", ScanOptions{Prefix: []byte("b"), Start: []byte("b10")}, []string{"b10", "b2"}},
		{"start before prefix", ScanOptions{Prefix: []byte("b"), Start: []byte("a")}, []string{"b1", "b10", "b2"}},
		{"start after prefix", ScanOptions{Prefix: []byte("b"), Start: []byte("c")}, nil},
		{"limit", ScanOptions{Limit: 2}, []string{"a1", "a2"}},
		{"prefix limit", ScanOptions{Prefix: []byte("b"), Limit: 1}, []string{"b1"}},
		{"no match", ScanOptions{Prefix: []byte("z")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kvs, err := s.Scan("t", tt.o)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range kvs {
				got = append(got, string(e.Key))
				if string(e.Value) != "v"+string(e.Key) {
					t.Errorf("value of %q = %q", e.Key, e.Value)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Scan(%+v) = %q, want %q", tt.o, got, tt.want)
			}
		})
	}
}

func TestScanLimits(t *testing.T) {
	s := openMem(t)
	puts := make([]KV, MaxScanLimit+5)
	for i := range puts {
		puts[i] = kv(fmt.Sprintf("k%06d", i), "v")
	}
	mustApply(t, s, "t", Commit{Seq: 1, Puts: puts})
	for _, tt := range []struct{ limit, want int }{{0, DefaultScanLimit}, {-1, DefaultScanLimit}, {MaxScanLimit * 2, MaxScanLimit}, {7, 7}} {
		kvs, err := s.Scan("t", ScanOptions{Limit: tt.limit})
		if err != nil || len(kvs) != tt.want {
			t.Errorf("Scan(Limit %d) = %d keys, %v; want %d", tt.limit, len(kvs), err, tt.want)
		}
	}
}

func TestDropAndTasks(t *testing.T) {
	s := openMem(t)
	mustApply(t, s, "t1", Commit{Seq: 5, Epoch: 2, Checkpoint: []byte("cp"), Puts: []KV{kv("a", "1")}})
	mustApply(t, s, "t0", Commit{Seq: 6, Puts: []KV{kv("a", "1")}})
	mustApply(t, s, "t2", Commit{Seq: 9, Epoch: 1})
	metas, err := s.Tasks()
	if err != nil {
		t.Fatal(err)
	}
	want := []Meta{
		{Task: "t0", Applied: 6},
		{Task: "t1", Applied: 5, Epoch: 2, Checkpoint: []byte("cp")},
		{Task: "t2", Applied: 9, Epoch: 1},
	}
	if !reflect.DeepEqual(metas, want) {
		t.Fatalf("Tasks() = %+v, want %+v", metas, want)
	}

	if err := s.Drop("t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("t1", []byte("a")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Drop err = %v, want ErrNotFound", err)
	}
	if _, ok, _ := s.Meta("t1"); ok {
		t.Error("Meta after Drop is ok, want not ok")
	}
	if got := mustGet(t, s, "t0", "a"); got != "1" {
		t.Errorf("Drop(t1) touched t0: Get = %q", got)
	}
	metas, _ = s.Tasks()
	if len(metas) != 2 || metas[0].Task != "t0" || metas[1].Task != "t2" {
		t.Errorf("Tasks() after Drop = %+v", metas)
	}
	if err := s.Drop("never"); err != nil {
		t.Errorf("Drop(unknown) = %v", err)
	}
	// A dropped task starts over from nothing.
	mustApply(t, s, "t1", Commit{Seq: 1, Puts: []KV{kv("b", "2")}})
	wantMeta(t, s, Meta{Task: "t1", Applied: 1})
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, "t", Commit{Seq: 4, Epoch: 3, Checkpoint: []byte("cp"), Puts: []KV{kv("a", "1"), kv("b", "2")}})
	mustApply(t, s, "u", Commit{Seq: 5, Puts: []KV{kv("z", "9")}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("t", []byte("a")); !errors.Is(err, ErrClosed) {
		t.Errorf("Get on a closed store err = %v, want ErrClosed", err)
	}
	if err := s.Apply("t", Commit{Seq: 9}); !errors.Is(err, ErrClosed) {
		t.Errorf("Apply on a closed store err = %v, want ErrClosed", err)
	}

	s, err = Open(dir, Options{Logger: zerolog.Nop(), Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantMeta(t, s, Meta{Task: "t", Applied: 4, Epoch: 3, Checkpoint: []byte("cp")})
	if got := mustGet(t, s, "t", "b"); got != "2" {
		t.Errorf("Get(b) after reopen = %q", got)
	}
	if got := mustGet(t, s, "u", "z"); got != "9" {
		t.Errorf("Get(u, z) after reopen = %q", got)
	}
}

func TestOpenTwiceInProcess(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if s2, err := Open(dir+"/.", Options{Logger: zerolog.Nop()}); !errors.Is(err, ErrLocked) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("second Open err = %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s.Close()

	mem := vfs.NewMem()
	m1, err := Open("db", Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	if _, err := Open("db", Options{FS: mem}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open on one MemFS err = %v, want ErrLocked", err)
	}
}

const helperEnv = "STATESTORE_TEST_HOLD_DIR"

// TestMain lets the test binary act as another process holding a store.
func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		s, err := Open(dir, Options{Logger: zerolog.Nop()})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // hold until the parent closes stdin
		s.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestOpenLockedByOtherProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	s, err := Open(dir, Options{Logger: zerolog.Nop()})
	if !errors.Is(err, ErrLocked) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open of a dir held by another process err = %v, want ErrLocked", err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	s, err = Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("Open after the other process exited: %v", err)
	}
	s.Close()
}

func TestConcurrentUse(t *testing.T) {
	s := openMem(t)
	const tasks, commits = 4, 100
	var wg sync.WaitGroup
	for i := range tasks {
		task := fmt.Sprintf("t%d", i)
		wg.Add(2)
		go func() { // writer
			defer wg.Done()
			for seq := uint64(1); seq <= commits; seq++ {
				c := Commit{Seq: seq, Epoch: 1, Checkpoint: fmt.Appendf(nil, "%d", seq),
					Puts: []KV{kv(fmt.Sprintf("k%d", seq%10), fmt.Sprintf("%d", seq))}}
				if seq%3 == 0 {
					c.Deletes = [][]byte{fmt.Appendf(nil, "k%d", (seq+5)%10)}
				}
				if err := s.Apply(task, c); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() { // readers and a concurrent replayer of the same commits
			defer wg.Done()
			for seq := uint64(1); seq <= commits; seq++ {
				if _, err := s.Scan(task, ScanOptions{}); err != nil {
					t.Error(err)
				}
				if _, err := s.Get(task, []byte("k1")); err != nil && !errors.Is(err, ErrNotFound) {
					t.Error(err)
				}
				if _, _, err := s.Meta(task); err != nil {
					t.Error(err)
				}
				if _, err := s.Tasks(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	for i := range tasks {
		task := fmt.Sprintf("t%d", i)
		wantMeta(t, s, Meta{Task: task, Applied: commits, Epoch: 1, Checkpoint: []byte(fmt.Sprint(commits))})
		// Replaying the same history sequentially on a fresh store gives the same data.
		ref := openMem(t)
		for seq := uint64(1); seq <= commits; seq++ {
			c := Commit{Seq: seq, Puts: []KV{kv(fmt.Sprintf("k%d", seq%10), fmt.Sprintf("%d", seq))}}
			if seq%3 == 0 {
				c.Deletes = [][]byte{fmt.Appendf(nil, "k%d", (seq+5)%10)}
			}
			mustApply(t, ref, task, c)
		}
		got, _ := s.Scan(task, ScanOptions{})
		want, _ := ref.Scan(task, ScanOptions{})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("task %s: concurrent state %q, want %q", task, got, want)
		}
	}
}

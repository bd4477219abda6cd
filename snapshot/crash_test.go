package snapshot_test

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
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/internal/poll"
	"github.com/handoffhq/handoff/restore"
	"github.com/handoffhq/handoff/snapshot"
	"github.com/handoffhq/handoff/snapshot/local"
)

// Environment of the upload helper process.
const (
	uploadURLEnv = "SNAPSHOT_TEST_UPLOAD_NATS"
	uploadSeqEnv = "SNAPSHOT_TEST_UPLOAD_SEQ"
	// uploadHangAfter is how many records the helper uploads (about 2 MB,
	// many chunks) before it says so and hangs.
	uploadHangAfter = 10000
)

func TestMain(m *testing.M) {
	if url := os.Getenv(uploadURLEnv); url != "" {
		if err := uploadAndHang(url, os.Getenv(uploadSeqEnv)); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		return // not reached: the parent kills us
	}
	os.Exit(m.Run())
}

// uploadAndHang uploads a large snapshot of task t and, part way, says
// "uploading" and hangs until killed.
func uploadAndHang(url, seqText string) error {
	seq, err := strconv.ParseUint(seqText, 10, 64)
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
	ctx := context.Background()
	b, err := snapshot.Open(ctx, js, snapshot.Options{Group: "g"})
	if err != nil {
		return err
	}
	src := &hangingSource{failingSource: failingSource{n: 1 << 20}, after: uploadHangAfter}
	_, err = b.PutSource(ctx, snapshot.Header{Task: "t", Seq: seq, Epoch: 1, Keys: 1 << 20}, src)
	return err
}

// hangingSource yields records and hangs at record after.
type hangingSource struct {
	failingSource
	after int
}

func (s *hangingSource) Next() bool {
	if s.i == s.after {
		fmt.Println("uploading")
		select {}
	}
	return s.failingSource.Next()
}

// TestKilledUploadKeepsPreviousSnapshot kills a process in the middle of
// uploading a snapshot: the previous snapshot stays the newest and usable,
// the changelog was not trimmed past it, and Sweep removes what the
// killed upload left.
func TestKilledUploadKeepsPreviousSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	w := &writer{log: e.log, store: memStore(t), task: "t"}
	for i := range 100 {
		w.commit(t, put(i, 30))
	}
	prev, err := local.Take(ctx, e.bucket, w.store, e.log, "t", snapshot.Retention{Keep: 1, Margin: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 150; i++ {
		w.commit(t, put(i, 30))
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), uploadURLEnv+"="+e.srv.URL, uploadSeqEnv+"="+strconv.FormatUint(w.last, 10))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "uploading\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper said %q, %v", line, err)
	}
	// Kill it once its chunks are in the bucket, as a crash mid-upload
	// leaves them.
	poll.Eventually(t, 10*time.Second, "the helper's chunks", func() error {
		if _, chunks := bucketSubjects(t, e); chunks < 2 {
			return fmt.Errorf("%d chunk subjects", chunks)
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("helper exit: %v, want killed", err)
	}

	list, err := e.bucket.List(ctx, "t")
	if err != nil || len(list) != 1 || list[0].Seq != prev.Info.Seq {
		t.Fatalf("List after the killed upload = %+v, %v; want only the snapshot at %d", list, err, prev.Info.Seq)
	}
	// A new member restores from the previous snapshot and the changelog
	// after it, which is all still there.
	fresh := memStore(t)
	r := restore.New(e.log, fresh, restore.Options{Task: "t", Snapshots: e.bucket})
	if _, err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.LoadedSnapshot(); !ok || got.Seq != prev.Info.Seq {
		t.Errorf("restore loaded %+v (%v), want the previous snapshot at %d", got, ok, prev.Info.Seq)
	}
	if p := r.Progress(); p.Replayed != 50 {
		t.Errorf("replayed %d messages, want the 50 after the previous snapshot", p.Replayed)
	}
	if got, want := allKVs(t, fresh, "t"), allKVs(t, w.store, "t"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("restored %d keys, want the writer's %d", len(got), len(want))
	}

	if n, err := e.bucket.Sweep(ctx, 0); err != nil || n != 1 {
		t.Errorf("Sweep = %d, %v; want the killed upload's chunks removed", n, err)
	}
	if metas, chunks := bucketSubjects(t, e); metas != 1 || chunks != 1 {
		t.Errorf("after Sweep %d metadata and %d chunk subjects, want 1 and 1", metas, chunks)
	}
}

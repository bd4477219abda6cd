package lab

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/record"
)

func testConfig() assign.Config {
	cfg := assign.DefaultConfig()
	cfg.Stateful = []string{"orders-0..3"}
	cfg.Stateless = []string{"mail-0..1"}
	cfg.SessionTimeout = assign.Duration(2 * time.Second)
	cfg.ReleaseTimeout = assign.Duration(10 * time.Second)
	cfg.MaxLearnersPerMember = 0
	cfg.AcceptableLag = 10
	return cfg
}

func openLab(t *testing.T, cfg assign.Config) *Lab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Sampled often: a learner of a small history lives a few
	// milliseconds, and learner-seconds come from the samples.
	l, err := Open(ctx, Options{Config: cfg, Seed: 1, MaxDelay: 10 * time.Millisecond, SampleEvery: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestScaleUpLeaveCrashRestart drives a small group through every
// operation under input and checks that the counts come out exact, that
// the recorder saw the moves and their pauses, and that warm moves replayed
// nothing in activations.
func TestScaleUpLeaveCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a group of agents")
	}
	l := openLab(t, testConfig())
	ctx := withTimeout(t, 90*time.Second)
	const keys = 500
	hist, err := l.Preload(ctx, History{Keys: keys, ValueSize: 64, PerMessage: 50})
	if err != nil {
		t.Fatal(err)
	}
	if hist.Tasks != 4 || hist.Records != 4*keys || hist.Messages != 4*(1+keys/50) {
		t.Errorf("Preload = %+v, want 4 tasks of %d records in %d messages", hist, keys, 1+keys/50)
	}
	l.Input().Start(200)
	for _, id := range []string{"m1", "m2"} {
		if _, err := l.AddMember(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	waitOwned(ctx, t, l, "m1", "m2")

	initial := l.ActivationReplayed() // the first owners restored the history
	scaleUp := l.Recorder().Mark("scale up")
	if _, err := l.AddMember(ctx, "m3"); err != nil {
		t.Fatal(err)
	}
	waitOwned(ctx, t, l, "m1", "m2", "m3")
	if n := countPauses(l.Recorder().Pauses(scaleUp), record.PausePlanned); n == 0 {
		t.Errorf("no planned pause after the scale-up, want the moves to m3")
	}
	if b, ok := l.Recorder().Balanced(scaleUp); !ok || b.Generation <= l.Recorder().GenerationAt(scaleUp) {
		t.Errorf("Balanced(scale-up) = %+v, %v; want balanced at a later generation than %d", b, ok, l.Recorder().GenerationAt(scaleUp))
	}
	if v := l.ActivationReplayed() - initial; v != 0 {
		t.Errorf("activations replayed %v messages after planned moves, want 0", v)
	}

	leave := l.Recorder().Mark("leave")
	if err := l.Leave(ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitStopped(ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	if st := l.Member("m1").State(); st != MemberLeft {
		t.Errorf("m1 is %s after its leave, want %s", st, MemberLeft)
	}
	waitOwned(ctx, t, l, "m2", "m3")
	if n := countPauses(l.Recorder().Pauses(leave), record.PausePlanned); n == 0 {
		t.Errorf("no planned pause after the leave")
	}

	// Crash the member that does not lead: a leader's crash adds an
	// election, which the agent's own tests cover.
	victim, survivor := "m3", "m2"
	if l.Recorder().Snapshot().Leader == "m3" {
		victim, survivor = "m2", "m3"
	}
	crash := l.Recorder().Mark("crash")
	if err := l.Crash(victim); err != nil {
		t.Fatal(err)
	}
	waitOwned(ctx, t, l, survivor)
	if n := countPauses(l.Recorder().Pauses(crash), record.PauseFailover); n == 0 {
		t.Errorf("no failover pause after the crash")
	}
	if err := l.Restart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	waitOwned(ctx, t, l, "m2", "m3")

	if err := l.Input().Stop(); err != nil {
		t.Fatal(err)
	}
	if err := l.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := l.Check(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Exact {
		t.Errorf("Check: %s", res.Summary())
	}
	if res.Counted == 0 {
		t.Errorf("Check counted no input")
	}
	checkSeesStaleAcks(ctx, t, l, res)
	for _, p := range l.Recorder().Pauses(time.Time{}) {
		if p.Unfinished {
			t.Errorf("pause %+v never ended", p)
		}
	}
	var learned, records uint64
	for _, rp := range l.Recorder().Replays(scaleUp) {
		if rp.Role == api.RoleLearner {
			learned += rp.Messages
			records += rp.Records
			// A tail may replay only an epoch marker or a release entry:
			// bytes, and no records.
			if rp.Bytes == 0 {
				t.Errorf("replay %+v has no bytes from the changelog", rp)
			}
		}
	}
	if learned == 0 || records == 0 {
		t.Errorf("learners replayed %d messages and %d records after the scale-up, want some of each", learned, records)
	}
	if s := l.Recorder().RoleSeconds(RoleLearner, scaleUp, time.Now()); s <= 0 {
		t.Errorf("learner-seconds = %v, want > 0", s)
	}
}

// checkSeesStaleAcks: the lab's check (so the demo's and the bench's
// "exact") judges the acknowledgements the workers got, not only the
// changelog: a commit acknowledged at epoch 1 after a later owner of the
// task took it over fails it. res is a passed check of the same run.
func checkSeesStaleAcks(ctx context.Context, t *testing.T, l *Lab, res CheckResult) {
	t.Helper()
	i := slices.IndexFunc(res.Tasks, func(tc record.TaskCheck) bool { return tc.Markers+tc.Releases > 1 })
	if i < 0 {
		t.Fatalf("no task changed owner in the run: %+v", res.Tasks)
	}
	task := res.Tasks[i].Task
	l.rec.workerEvent(record.Event{Member: "m1", Time: time.Now(), Type: client.EventCommit, Task: task, Seq: math.MaxUint64, Epoch: 1})
	again, err := l.Check(ctx, -1)
	if err != nil {
		t.Fatal(err)
	}
	j := slices.IndexFunc(again.Tasks, func(tc record.TaskCheck) bool { return tc.Task == task })
	if again.Exact || j < 0 || again.Tasks[j].Stale != 1 {
		t.Errorf("Check with a commit of %s acknowledged to its owner at epoch 1 after a later owner took over: %s; want it not exact, with 1 stale acknowledgement", task, again.Summary())
	}
}

// waitOwned waits until the group is steady with the tasks spread over
// exactly members, and shows the group if it does not get there.
func waitOwned(ctx context.Context, t *testing.T, l *Lab, members ...string) {
	t.Helper()
	if _, err := l.WaitSteady(ctx, 200*time.Millisecond, owns(members...)); err != nil {
		snap := l.Recorder().Snapshot()
		for _, m := range snap.Members {
			t.Logf("member %s: %s/%s active %v learning %v", m.ID, m.State, m.GroupState, m.Active, m.Learning)
		}
		for _, task := range snap.Tasks {
			t.Logf("task %s: owner %s (%s), running on %q, learners %d", task.ID, task.Owner, task.OwnerRole, task.Running, len(task.Learners))
		}
		t.Fatalf("waiting for %v to own every task: %v (steady %v)", members, err, snap.Steady)
	}
}

// owns holds when every listed member owns a task and no other member does.
func owns(members ...string) func(Snapshot) bool {
	return func(s Snapshot) bool {
		want := map[string]bool{}
		for _, m := range members {
			want[m] = true
		}
		got := map[string]bool{}
		for _, t := range s.Tasks {
			if !want[t.Owner] {
				return false
			}
			got[t.Owner] = true
		}
		return len(got) == len(want)
	}
}

func countPauses(ps []record.Pause, kind string) int {
	n := 0
	for _, p := range ps {
		if p.Kind == kind {
			n++
		}
	}
	return n
}

func TestOpenRejectsBadConfig(t *testing.T) {
	cfg := testConfig()
	cfg.Handover = "sideways"
	_, err := Open(context.Background(), Options{Config: cfg})
	if err == nil {
		t.Fatal("Open with handover \"sideways\" = nil error, want one")
	}
}

func TestFormatPause(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{310 * time.Microsecond, "0.31 ms"},
		{3100 * time.Microsecond, "3.1 ms"},
		{250 * time.Millisecond, "250 ms"},
		{2310 * time.Millisecond, "2.31 s"},
	}
	for _, tt := range tests {
		if got := FormatPause(tt.d); got != tt.want {
			t.Errorf("FormatPause(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

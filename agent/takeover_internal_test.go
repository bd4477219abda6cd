package agent

import (
	"context"
	"testing"
	"time"

	"github.com/handoffhq/handoff/changelog"
)

// activationAgent is appendAgent's member m1 as the successor of task t0:
// the owner at epoch 1 has appended a release entry naming m1 at epoch 2,
// the last message of the subject, and the generation activates t0 on m1
// at that epoch (the leader recorded the hand-off before m1's tailer saw
// the entry). It returns the agent, the task (activating at epoch 2, its
// store at the commit before the entry) and the entry's sequence.
func activationAgent(t *testing.T) (*Agent, *task, uint64) {
	t.Helper()
	a, tk := appendAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if a.tails, err = openReplayConn(ctx, a.nc, "tails", a.opts, a.log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.tails.close)
	a.bgCtx, a.bgStop = context.WithCancel(context.Background())
	t.Cleanup(a.bgStop)
	rel, err := a.clog.Append(ctx, tk.id, tk.lastSeq, changelog.Entry{Kind: changelog.KindRelease, Epoch: 2, Successor: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	tk.phase, tk.epoch, tk.revoke, tk.lastSeq = phaseActivating, 2, nil, 0
	return a, tk, rel
}

// checkTakenOver: t0 is active at epoch 2 from the release entry at rel,
// its store has applied the entry, and nobody appended after it (no epoch
// marker).
func checkTakenOver(t *testing.T, a *Agent, tk *task, rel uint64) {
	t.Helper()
	if st := tk.state(); st.phase != phaseActive || st.epoch != 2 || tk.lastSeq != rel || tk.takeover == nil {
		t.Errorf("task after the activation: %v at epoch %d, lastSeq %d, takeover %+v; want active at 2 from seq %d, taken over", st.phase, st.epoch, tk.lastSeq, tk.takeover, rel)
	}
	if m, _, err := a.store.Meta(tk.id); err != nil || m.Applied != rel || m.Epoch != 2 {
		t.Errorf("store meta %+v, %v; want the release entry applied (seq %d, epoch 2)", m, err, rel)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if last, err := a.clog.Last(ctx, tk.id); err != nil || last != rel {
		t.Errorf("the subject's last message is %d (%v), want the release entry %d: the activation appended a marker after it", last, err, rel)
	}
}

// TestActivationTakesOverFromTheEntryItMeets: an activation whose own
// catch-up stops at a release entry naming this member at its epoch takes
// the task over from it, as a tailer would, and appends no marker.
func TestActivationTakesOverFromTheEntryItMeets(t *testing.T) {
	a, tk, rel := activationAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !a.activate(ctx, tk, nil, 2, rel, time.Now()) {
		t.Error("activate = false, want it to report that it took the task over")
	}
	checkTakenOver(t, a, tk, rel)
}

// TestActivationLearnsItsTailerTookOver: an activation that gets a tailer
// still running, which has taken the task over from the release entry,
// learns it from the tailer's job and does nothing more: no marker.
func TestActivationLearnsItsTailerTookOver(t *testing.T) {
	a, tk, rel := activationAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	jctx, stop := context.WithCancel(ctx)
	defer stop()
	prev := &job{cancel: stop, done: make(chan struct{})}
	go func() {
		defer close(prev.done)
		prev.tookOver = a.tail(jctx, tk)
	}()
	<-prev.done // the tailer met the entry first
	if !prev.tookOver {
		t.Fatal("the tailer ended without taking the task over from the entry that names its member")
	}
	if !a.activate(ctx, tk, prev, 2, rel, time.Now()) {
		t.Error("activate = false, want it to report that its tailer took the task over")
	}
	checkTakenOver(t, a, tk, rel)
}

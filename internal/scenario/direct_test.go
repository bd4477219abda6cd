package scenario

import (
	"sync"
	"testing"
	"time"
)

// The direct hand-off's faults across processes (docs/ARCHITECTURE.md, "The
// direct hand-off: why it is safe"): a fourth member joins a loaded group
// of three, and a process is killed or paused at a step of a hand-off to
// it. Every scenario ends settled with nothing acknowledged lost and no
// commit acknowledged to a stale owner (Verify).

// joined is what a trigger saw of a hand-off.
type joined struct {
	mu                  sync.Mutex
	task, owner, target string
	epoch               uint64
}

func (j *joined) set(task, owner, target string, epoch uint64) {
	j.mu.Lock()
	j.task, j.owner, j.target, j.epoch = task, owner, target, epoch
	j.mu.Unlock()
}

func (j *joined) get() (task, owner, target string, epoch uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.task, j.owner, j.target, j.epoch
}

// tookOver reports whether member took task over directly at epoch after
// mark.
func (h *Harness) tookOver(mark map[string]int, member, task string, epoch uint64) bool {
	for _, tk := range h.Member(member).Log.TakeoversAfter(mark[member]) {
		if tk.Task == task && tk.Epoch == epoch {
			return true
		}
	}
	return false
}

// TestDirectHandoffOldOwnerKilled kills -9 the old owner (agent and
// worker) of a task the moment its release entry to the newcomer lands.
// The newcomer takes the task over from the changelog and keeps it at the
// entry's epoch while the old owner's other tasks fail over.
func TestDirectHandoffOldOwnerKilled(t *testing.T) {
	skipShort(t)
	h := New(t, DefaultOptions())
	h.Start(3)
	gv := h.mustGroup()
	owners := map[string]string{}
	for _, gt := range gv.Tasks {
		owners[gt.ID] = gt.Active
	}
	mark := h.Mark()
	var seen joined
	tr := h.OnReleaseEntry("a release entry from a member that does not lead", func(task, successor string, epoch uint64) bool {
		owner := owners[task]
		if owner == "" || owner == gv.Leader {
			return false
		}
		if err := h.Member(owner).Kill(); err != nil {
			t.Errorf("kill %s: %v", owner, err)
		}
		seen.set(task, owner, successor, epoch)
		return true
	})
	h.AddMember("m4")
	tr.Wait(h, 90*time.Second)
	task, owner, successor, epoch := seen.get()
	h.Logf("killed %s (-9) as its release entry of %s to %s at epoch %d landed", owner, task, successor, epoch)
	h.WaitSettled(90*time.Second, without([]string{"m1", "m2", "m3", "m4"}, owner)...)
	h.WaitCommitting(60*time.Second, 3)
	if !h.tookOver(mark, successor, task, epoch) {
		t.Errorf("%s did not take %s over at epoch %d from the release entry", successor, task, epoch)
	}
	h.Verify(Expect{Mark: mark})
}

// TestDirectHandoffSuccessorPaused pauses the newcomer (SIGSTOP, agent and
// worker) the moment a task is revoked to it, before its owner releases.
// The release entry names a member that cannot take over; once the
// newcomer's session expires, the task fails over from it at a higher
// epoch. The newcomer then resumes and the group settles on four again.
func TestDirectHandoffSuccessorPaused(t *testing.T) {
	skipShort(t)
	h := New(t, DefaultOptions())
	h.Start(3)
	mark := h.Mark()
	var seen joined
	m4 := h.AddAgent("m4")
	tr := h.OnRevoke("a revoke to m4", func(_, target string) bool { return target == "m4" }, func(task, owner, target string) {
		if err := m4.Pause(); err != nil {
			t.Errorf("pause m4: %v", err)
		}
		seen.set(task, owner, target, 0)
	})
	h.StartWorker(m4)
	tr.Wait(h, 90*time.Second)
	task, owner, _, _ := seen.get()
	h.Logf("paused m4 as %s was revoked to it from %s", task, owner)
	after := h.WaitSettled(90*time.Second, "m1", "m2", "m3")
	var e uint64
	for _, gt := range after.Tasks {
		if gt.ID == task {
			e = gt.Epoch
			h.Logf("%s served by %s at epoch %d while m4 is paused", task, gt.Active, gt.Epoch)
		}
	}
	// What m4 logged before it was paused: it may have taken the task over
	// in the instant between the revoke and the pause, at the revoke's
	// epoch, which is no fault (its session then lapsed and the task failed
	// over above it). Only a takeover after it resumed must not be stale.
	paused := m4.Log.Lines()
	if err := m4.Resume(); err != nil {
		t.Fatal(err)
	}
	h.WaitSettled(120*time.Second, "m1", "m2", "m3", "m4")
	h.WaitCommitting(60*time.Second, 3)
	h.Verify(Expect{Mark: mark})
	for _, tk := range m4.Log.TakeoversAfter(paused) {
		if tk.Task == task && tk.Epoch < e {
			t.Errorf("m4 took %s over at epoch %d after it resumed, below the failover's %d", task, tk.Epoch, e)
		}
	}
}

// TestDirectHandoffLeaderKilled kills -9 the leader the moment it has
// published a revoke to the newcomer from another member. The newcomer
// takes the task over from the release entry with no leader alive, and the
// next leader records it.
func TestDirectHandoffLeaderKilled(t *testing.T) {
	skipShort(t)
	h := New(t, DefaultOptions())
	h.Start(3)
	gv := h.mustGroup()
	leader := h.Member(gv.Leader)
	mark := h.Mark()
	var seen joined
	tr := h.OnRevoke("a revoke to m4 from a member that does not lead", func(owner, target string) bool {
		return target == "m4" && owner != leader.ID
	}, func(task, owner, target string) {
		if err := leader.Kill(); err != nil {
			t.Errorf("kill the leader %s: %v", leader.ID, err)
		}
		seen.set(task, owner, target, 0)
	})
	h.AddMember("m4")
	tr.Wait(h, 90*time.Second)
	task, owner, _, _ := seen.get()
	h.Logf("killed the leader %s (-9) as it revoked %s from %s to m4", leader.ID, task, owner)
	after := h.WaitSettled(90*time.Second, without([]string{"m1", "m2", "m3", "m4"}, leader.ID)...)
	h.WaitCommitting(60*time.Second, 3)
	rep := h.Verify(Expect{Mark: mark})
	taken := false
	for _, tk := range rep.Takeovers {
		taken = taken || tk.Member == "m4" && tk.Task == task
	}
	if !taken {
		t.Errorf("m4 did not take %s over directly; the group ended with %+v", task, after.Tasks)
	}
}

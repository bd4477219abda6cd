package scenario

import (
	"testing"
	"time"
)

// TestCrash kills -9 a member that owns tasks (agent and worker) under
// load. Its tasks fail over to the survivors at higher epochs, which replay
// what they lack (the one case a task may wait for a restore); then the
// member restarts with its data dir and the group settles on three again.
// Nothing acknowledged is lost and the counts stay exact.
func TestCrash(t *testing.T) {
	skipShort(t)
	h := New(t, DefaultOptions())
	h.Start(3)
	gv := h.mustGroup()
	victim := h.Member(pickNot(gv.Leader, "m1", "m2", "m3"))
	owned, _ := Owned(gv, victim.ID)
	if len(owned) == 0 {
		t.Fatalf("%s owns no stateful task: %+v", victim.ID, gv.Tasks)
	}
	before := Epochs(gv)
	mark := h.Mark()

	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	h.Logf("killed %s (-9), which owned %v; leader %s", victim.ID, owned, gv.Leader)
	others := without([]string{"m1", "m2", "m3"}, victim.ID)
	after := h.WaitSettled(60*time.Second, others...)
	for _, task := range owned {
		if e := Epochs(after)[task]; e <= before[task] {
			t.Errorf("%s failed over at epoch %d, want above %d", task, e, before[task])
		}
	}
	failover := h.activationsAfter(mark)
	for _, a := range failover {
		h.Logf("failover: %s active on %s at epoch %d, planned=%v, replayed %d", a.Task, a.Member, a.Epoch, a.Planned, a.Replayed)
	}
	h.WaitCommitting(60*time.Second, 3)

	h.Restart(victim)
	h.WaitSettled(90*time.Second, "m1", "m2", "m3")
	h.WaitCommitting(60*time.Second, 3)
	h.Verify(Expect{Mark: mark})
}

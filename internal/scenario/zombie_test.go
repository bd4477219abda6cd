package scenario

import (
	"fmt"
	"testing"
	"time"

	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/record"
)

// TestZombie freezes the leader (agent and worker, SIGSTOP) past the
// session timeout, lets its tasks fail over, then lets it run again
// (SIGCONT). The zombie's worker resumes with work in hand at its old
// epochs: every commit it then tries must be refused, so no commit of its
// old epoch follows the new owner's epoch marker in any changelog, and its
// worker got no acknowledgement after the takeover.
func TestZombie(t *testing.T) {
	skipShort(t)
	h := New(t, DefaultOptions())
	h.Start(3)
	gv := h.mustGroup()
	zombie := h.Member(gv.Leader)
	owned, _ := Owned(gv, zombie.ID)
	if len(owned) == 0 {
		t.Fatalf("leader %s owns no stateful task: %+v", zombie.ID, gv.Tasks)
	}
	oldEpochs := Epochs(gv)
	mark := h.Mark()

	if err := zombie.Pause(); err != nil {
		t.Fatal(err)
	}
	h.Logf("paused %s (the leader), which owns %v", zombie.ID, owned)
	others := without([]string{"m1", "m2", "m3"}, zombie.ID)
	h.Eventually("the zombie's tasks taken over", 60*time.Second, func() error {
		gv, err := h.Group()
		if err != nil {
			return err
		}
		for _, task := range owned {
			for _, gt := range gv.Tasks {
				if gt.ID == task && (gt.Active == zombie.ID || gt.Active == "" || gt.Epoch <= oldEpochs[task]) {
					return fmt.Errorf("%s still on %q at epoch %d", task, gt.Active, gt.Epoch)
				}
			}
		}
		return nil
	})
	h.WaitSettled(60*time.Second, others...)
	h.WaitCommitting(60*time.Second, 3)

	resumed := time.Now()
	if err := zombie.Resume(); err != nil {
		t.Fatal(err)
	}
	h.Logf("resumed %s", zombie.ID)
	h.WaitSettled(90*time.Second, "m1", "m2", "m3")
	h.WaitCommitting(60*time.Second, 3)
	rep := h.Verify(Expect{Mark: mark})

	// The zombie's view of its old epochs: nothing acknowledged after the
	// takeover, whatever it tried.
	refused, late := 0, 0
	for _, e := range rep.Events {
		if e.Member != zombie.ID || e.Time.Before(resumed) {
			continue
		}
		switch {
		case e.Type == client.EventRefused:
			refused++
		case e.Type == client.EventCommit && e.Epoch == oldEpochs[e.Task]:
			late++
		}
	}
	for _, task := range owned {
		recs := rep.Records[task]
		seq, ok := record.TakeoverSeq(recs, oldEpochs[task])
		if !ok {
			t.Errorf("%s: no epoch marker above the zombie's epoch %d in its changelog", task, oldEpochs[task])
			continue
		}
		for _, e := range rep.Events {
			if e.Member == zombie.ID && e.Task == task && e.Type == client.EventCommit && e.Epoch == oldEpochs[task] && e.Seq > seq {
				t.Errorf("%s: the zombie's commit at seq %d (epoch %d) was acknowledged after the takeover at seq %d", task, e.Seq, e.Epoch, seq)
			}
		}
	}
	h.Logf("zombie %s after SIGCONT: %d commits refused, %d commits at its old epochs acknowledged (each before its takeover)", zombie.ID, refused, late)
}

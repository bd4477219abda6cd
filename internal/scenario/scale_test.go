package scenario

import (
	"context"
	"testing"
	"time"
)

// TestScaleUpAndLeave grows a loaded group from 3 to 4 members and shrinks
// it back with POST /leave, in both hand-off modes. Every move is planned:
// no activation replays anything, no task has two owners at once, and the
// member that left exits by itself (agent and worker) once told shutdown.
func TestScaleUpAndLeave(t *testing.T) {
	skipShort(t)
	for _, mode := range []string{"eager", "stable"} {
		t.Run(mode, func(t *testing.T) {
			o := DefaultOptions()
			o.Handover = mode
			h := New(t, o)
			h.Start(3)
			mark := h.Mark()

			h.AddMember("m4")
			h.WaitSettled(90*time.Second, "m1", "m2", "m3", "m4")
			h.WaitCommitting(60*time.Second, 3)

			leaver := h.Member("m2")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := leaver.Leave(ctx); err != nil {
				t.Fatalf("POST /leave on m2: %v", err)
			}
			h.Logf("m2 leaving")
			h.WaitSettled(90*time.Second, "m1", "m3", "m4")
			h.checkLeft(leaver)
			h.WaitCommitting(60*time.Second, 3)
			h.Verify(Expect{Planned: true, Mark: mark})
		})
	}
}

package scenario

import (
	"testing"

	"github.com/handoffhq/handoff/api"
)

// mustGroup reads the group's view or fails the test.
func (h *Harness) mustGroup() api.GroupView {
	h.t.Helper()
	gv, err := h.Group()
	if err != nil {
		h.t.Fatal(err)
	}
	return gv
}

// pickNot returns the first of ids that is not avoid.
func pickNot(avoid string, ids ...string) string {
	for _, id := range ids {
		if id != avoid {
			return id
		}
	}
	return ids[0]
}

// without returns ids without drop.
func without(ids []string, drop string) []string {
	var out []string
	for _, id := range ids {
		if id != drop {
			out = append(out, id)
		}
	}
	return out
}

func TestPickNotAndWithout(t *testing.T) {
	if got := pickNot("m1", "m1", "m2"); got != "m2" {
		t.Errorf("pickNot(m1, m1 m2) = %s, want m2", got)
	}
	if got := without([]string{"a", "b", "c"}, "b"); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Errorf("without(a b c, b) = %v, want [a c]", got)
	}
}

// ownerPositions returns each stateful task's last changelog sequence,
// where its owner's copy is.
func (h *Harness) ownerPositions() map[string]uint64 {
	out := map[string]uint64{}
	for _, e := range h.allEvents() {
		if e.Type == "commit" {
			out[e.Task] = max(out[e.Task], e.Seq)
		}
	}
	return out
}

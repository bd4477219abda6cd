package scenario

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
)

// InFlight describes the hand-offs in flight in one member's assignment:
// its tasks that have a learner or a pending revoke; "" when none has.
func InFlight(ma group.MemberAssignment) string {
	ids := make([]string, 0, len(ma.Tasks))
	for id := range ma.Tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var parts []string
	for _, id := range ids {
		t := ma.Tasks[id]
		switch {
		case t.Revoke != nil:
			parts = append(parts, fmt.Sprintf("%s revoking %s→%s", id, ma.Member, t.Revoke.Target))
		case len(t.Learners) > 0:
			var ls []string
			for _, l := range t.Learners {
				ls = append(ls, l.Member)
			}
			parts = append(parts, fmt.Sprintf("%s on %s learning on %v", id, ma.Member, ls))
		}
	}
	return strings.Join(parts, ", ")
}

// Owned returns the tasks gv places on member, stateful ones first, each
// group sorted.
func Owned(gv api.GroupView, member string) (stateful, stateless []string) {
	for _, t := range gv.Tasks {
		if t.Active != member {
			continue
		}
		if t.Stateful {
			stateful = append(stateful, t.ID)
		} else {
			stateless = append(stateless, t.ID)
		}
	}
	sort.Strings(stateful)
	sort.Strings(stateless)
	return stateful, stateless
}

// Epochs returns each task's epoch in gv.
func Epochs(gv api.GroupView) map[string]uint64 {
	out := map[string]uint64{}
	for _, t := range gv.Tasks {
		out[t.ID] = t.Epoch
	}
	return out
}

// Positions reads how far member's local copy of each task reaches, as its
// member record reports it to the leader (the "positions" of the record
// under members.<id>, see docs/ARCHITECTURE.md).
func (h *Harness) Positions(member string) (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return h.group.Positions(ctx, member)
}

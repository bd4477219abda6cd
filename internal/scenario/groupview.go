package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/handoffhq/handoff/httpapi"
)

// Moving checks that some task is being handed over: it has a learner or
// a pending revoke.
func Moving(gv httpapi.GroupView) error {
	for _, t := range gv.Tasks {
		if len(t.Learners) > 0 || t.Revoking != "" {
			return nil
		}
	}
	return errors.New("no task is moving")
}

// InFlight describes the hand-offs in flight in gv, for the log.
func InFlight(gv httpapi.GroupView) string {
	var parts []string
	for _, t := range gv.Tasks {
		switch {
		case t.Revoking != "":
			parts = append(parts, fmt.Sprintf("%s revoking %s→%s", t.ID, t.Active, t.Revoking))
		case len(t.Learners) > 0:
			parts = append(parts, fmt.Sprintf("%s on %s learning on %v", t.ID, t.Active, t.Learners))
		}
	}
	if len(parts) == 0 {
		return "nothing in flight"
	}
	return fmt.Sprintf("generation %d: %s", gv.Generation, strings.Join(parts, ", "))
}

// Owned returns the tasks gv places on member, stateful ones first, each
// group sorted.
func Owned(gv httpapi.GroupView, member string) (stateful, stateless []string) {
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
func Epochs(gv httpapi.GroupView) map[string]uint64 {
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
	if _, err := h.Group(); err != nil { // opens the bucket
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := h.kv.Get(ctx, "members."+member)
	if err != nil {
		return nil, fmt.Errorf("read the record of %s: %w", member, err)
	}
	var rec struct {
		Positions map[string]uint64 `json:"positions"`
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, fmt.Errorf("decode the record of %s: %w", member, err)
	}
	return rec.Positions, nil
}

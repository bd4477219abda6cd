package assign

import (
	"errors"
	"fmt"
	"sort"
)

// Validate reports the problems with in that Plan would otherwise paper
// over, each naming the field and how to fix it: an invalid config, a
// missing time, members without an ID or listed twice, and tasks in the
// current assignment with no placement.
func (in Input) Validate() error {
	var errs []error
	if err := in.Config.Validate(); err != nil {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				errs = append(errs, fmt.Errorf("config: %w", e))
			}
		} else {
			errs = append(errs, fmt.Errorf("config: %w", err))
		}
	}
	if in.Now.IsZero() {
		errs = append(errs, errors.New(`now: missing; set it to the time of the snapshot, e.g. "2025-06-01T12:00:00Z"`))
	}
	seen := map[string]int{}
	for i, m := range in.Members {
		switch j, dup := seen[m.ID]; {
		case m.ID == "":
			errs = append(errs, fmt.Errorf("members[%d]: id is empty; give each member its stable ID (the pod name)", i))
		case dup:
			errs = append(errs, fmt.Errorf("members[%d]: id %q is also members[%d]; list each live member once", i, m.ID, j))
		default:
			seen[m.ID] = i
		}
	}
	var null []string
	for id, t := range in.Current.Tasks {
		if t == nil {
			null = append(null, id)
		}
	}
	sort.Strings(null)
	for _, id := range null {
		errs = append(errs, fmt.Errorf("current.tasks[%q]: null; give the task's placement or leave the task out", id))
	}
	return errors.Join(errs...)
}

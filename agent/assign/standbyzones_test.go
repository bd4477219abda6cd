package assign

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// copyZones counts the zones that task t's copies (its owner, standbys and
// learners) are in.
func copyZones(t *TaskAssignment, zone map[string]string) int {
	zs := map[string]bool{zone[t.Active]: true}
	for _, s := range t.Standbys {
		zs[zone[s]] = true
	}
	for _, l := range t.Learners {
		zs[zone[l.Member]] = true
	}
	return len(zs)
}

// checkStandbyZones plans members to a fixed point from current and fails
// if a task, between two of its settled points (no learner, no revoke,
// as many standbys as configured) under the same owner, ends up with its
// copies in fewer zones: standbys move for balance, never out of a zone no
// other copy uses.
func checkStandbyZones(t *testing.T, name string, ms []Member, cfg Config, current Assignment) {
	t.Helper()
	zone := map[string]string{}
	for _, m := range ms {
		zone[m.ID] = m.Zone
	}
	type settled struct {
		active string
		zones  int
		gen    uint64
	}
	last := map[string]settled{}
	for id, task := range current.Tasks {
		last[id] = settled{task.Active, copyZones(task, zone), current.Generation}
	}
	in := Input{Config: cfg, Now: at(0), Members: ms, Current: current}
	run := Simulate(in, time.Second, 200, func(_ Input, res Result) {
		for id, task := range res.Assignment.Tasks {
			if len(task.Learners) > 0 || task.Revoke != nil || len(task.Standbys) != cfg.Standbys {
				continue
			}
			now := settled{task.Active, copyZones(task, zone), res.Assignment.Generation}
			if prev, ok := last[id]; ok && prev.active == now.active && now.zones < prev.zones {
				t.Errorf("%s: task %s on %s: its copies were in %d zones at generation %d, in %d at generation %d (standbys %v)",
					name, id, now.active, prev.zones, prev.gen, now.zones, now.gen, task.Standbys)
			}
			last[id] = now
		}
	})
	if !run.Converged {
		t.Errorf("%s: did not converge in 200 plans", name)
	}
}

// TestStandbyBalanceKeepsZones: a layout where finishing a standby move
// could keep the wrong one of two copies equally above their members'
// quota and drop the only copy in a zone.
func TestStandbyBalanceKeepsZones(t *testing.T) {
	zones := []string{"z0", "z3", "z0", "z2", "z3", "z0", "z0"}
	ms := make([]Member, len(zones))
	for i, z := range zones {
		ms[i] = Member{ID: fmt.Sprintf("m%02d", i), Zone: z}
	}
	checkStandbyZones(t, "seven members in three zones", ms, config("s-0..1", "", func(c *Config) { c.Standbys = 3 }), Assignment{})
}

// TestStandbyBalanceKeepsZonesRandom draws small zoned groups.
func TestStandbyBalanceKeepsZonesRandom(t *testing.T) {
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 7))
		n, nz := 3+r.IntN(5), 1+r.IntN(4)
		ms := make([]Member, n)
		for i := range ms {
			ms[i] = Member{ID: fmt.Sprintf("m%02d", i), Zone: fmt.Sprintf("z%d", r.IntN(nz))}
		}
		standbys := min(1+r.IntN(3), n-1)
		tasks := 1 + r.IntN(4)
		cfg := config(fmt.Sprintf("s-0..%d", tasks-1), "", func(c *Config) { c.Standbys = standbys })
		// Start from a random placement, every copy caught up.
		cur := Assignment{Generation: 1, Tasks: map[string]*TaskAssignment{}}
		for k := range tasks {
			perm := r.Perm(n)
			ta := &TaskAssignment{Active: ms[perm[0]].ID, Epoch: 1}
			for _, j := range perm[1 : 1+standbys] {
				ta.Standbys = append(ta.Standbys, ms[j].ID)
			}
			slices.Sort(ta.Standbys)
			cur.Tasks[fmt.Sprintf("s-%d", k)] = ta
		}
		checkStandbyZones(t, fmt.Sprintf("seed %d", seed), slices.Clone(ms), cfg, cur)
		if t.Failed() {
			return
		}
	}
}

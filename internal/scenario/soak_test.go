package scenario

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/internal/record"
)

// soakSettings reads the chaos soak's duration (HANDOFF_SOAK, e.g. 3m) and
// seed (HANDOFF_SOAK_SEED; a fresh one if unset). ok is false if
// HANDOFF_SOAK is unset.
func soakSettings(t *testing.T) (d time.Duration, seed uint64, ok bool) {
	t.Helper()
	v := os.Getenv("HANDOFF_SOAK")
	if v == "" {
		return 0, 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("HANDOFF_SOAK=%q: use a positive duration such as 3m", v)
	}
	seed = uint64(time.Now().UnixNano())
	if s := os.Getenv("HANDOFF_SOAK_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("HANDOFF_SOAK_SEED=%q: use the decimal seed a soak printed", s)
		}
	}
	return d, seed, true
}

// TestChaosSoak runs a group of three members (separate agent and worker
// processes, one nats-server process) under continuous input for
// HANDOFF_SOAK while a schedule drawn from HANDOFF_SOAK_SEED injects
// faults one after another: kill -9 of members, of agents alone and of
// workers alone, SIGSTOP/SIGCONT (sometimes past the session timeout),
// nats-server kill -9 and restart, leaves, joins, SIGTERM restarts and
// rolling restarts, sometimes each on top of the group's reaction to the
// last. Then it lets the group settle and checks what every scenario
// checks: each task's changelog one chain, exact counts, no acknowledged
// commit lost, none acknowledged to a stale owner. It logs each fault, the
// commits acknowledged and lost, and each agent's RSS at its first and last
// sample. A failure logs the seed and the command that replays its
// schedule.
func TestChaosSoak(t *testing.T) {
	d, seed, ok := soakSettings(t)
	if !ok {
		t.Skip("chaos soak: set HANDOFF_SOAK=3m to run it (HANDOFF_SOAK_SEED=N replays a seed)")
	}
	skipShort(t)
	rerun := fmt.Sprintf("HANDOFF_SOAK=%s HANDOFF_SOAK_SEED=%d go test -v -run TestChaosSoak -timeout %s ./internal/scenario/",
		d, seed, (d + 12*time.Minute).Round(time.Minute))
	// Registered before New's cleanup, so it runs after it: last in the output.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos soak failed with seed %d; replay its schedule with:\n  %s", seed, rerun)
		}
	})
	o := DefaultOptions()
	h := New(t, o)
	h.Logf("chaos soak: %s of faults, seed %d (replay: %s)", d, seed, rerun)
	h.Start(3)
	rss := trackRSS(2*time.Second, h.Members()...)
	defer rss.stop()
	tracked := len(h.Members())
	sched := NewSchedule(seed, 3, o.SessionTimeout)
	mark := h.Mark()

	var faults []Fault
	var at []time.Duration
	began := time.Now()
	for time.Since(began) < d {
		f := sched.Next()
		at = append(at, time.Since(h.start))
		h.Inject(f, sched.Running())
		faults = append(faults, f)
		for _, m := range h.Members()[tracked:] {
			rss.add(m)
		}
		tracked = len(h.Members())
		hold(f.Gap)
	}
	h.Logf("chaos soak: %d faults injected in %s; letting the group settle", len(faults), time.Since(began).Round(time.Second))
	h.WaitSettled(3*time.Minute, sched.Running()...)
	h.WaitCommitting(time.Minute, 3)
	runs := rss.stop()
	rep := h.Verify(Expect{Mark: mark})

	lost, stale := 0, 0
	acks := map[string][]record.Acked{}
	for _, a := range record.Acks(rep.Events) {
		acks[a.Task] = append(acks[a.Task], a)
	}
	for task, recs := range rep.Records {
		lost += len(record.MissingAcks(recs, acks[task]))
		stale += len(record.AckedAfterTakeover(recs, acks[task]))
	}

	var b strings.Builder
	fmt.Fprintf(&b, "chaos soak summary (seed %d, %s of faults):\n", seed, d)
	kinds := map[FaultKind]int{}
	for i, f := range faults {
		kinds[f.Kind]++
		fmt.Fprintf(&b, "  fault %2d at %7.2fs (seed %d): %s\n", f.N, at[i].Seconds(), f.Seed, f)
	}
	names := make([]string, 0, len(kinds))
	for k, n := range kinds {
		names = append(names, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "  faults injected: %d (%s)\n", len(faults), strings.Join(names, ", "))
	fmt.Fprintf(&b, "  commits acknowledged: %d; commits lost: %d; acknowledged to a stale owner: %d; refused: %d; worker restarts: %d\n",
		rep.Commits, lost, stale, rep.Refused, rep.Restarts)
	planned, unplanned := 0, 0
	viaLeader := map[string]int{} // why a planned activation went through the leader
	for _, a := range rep.Activations {
		if !a.Planned {
			unplanned++
			continue
		}
		planned++
		recs, stateful := rep.Records[a.Task]
		switch {
		case !stateful:
			viaLeader["stateless, the hand-off message lost or late"]++
		case slices.ContainsFunc(recs, func(r changelog.Record) bool {
			return r.Entry.Kind == changelog.KindRelease && r.Entry.Successor == a.Member && r.Entry.Epoch == a.Epoch
		}):
			// A release entry named it: the leader's generation reached
			// it before its tailer took the task over (or the tailer
			// refused: the successor was paused, or late).
			viaLeader["after a release entry naming it, the generation first"]++
		default:
			viaLeader["no release entry named it"]++
		}
	}
	why := map[string]int{}
	for _, m := range h.Members() {
		for w, n := range m.Log.ReleasesViaLeader() {
			why[w] += n
		}
	}
	stateful := 0
	for _, tk := range rep.Takeovers {
		if _, ok := rep.Records[tk.Task]; ok {
			stateful++
		}
	}
	fmt.Fprintf(&b, "  planned hand-offs: %d taken over directly (%d stateful, %d stateless; %d release entries in the stateful tasks' changelogs, before the mark included); %d activated through the leader (%s); releases through the leader, by why: %s; failovers and other activations: %d\n",
		len(rep.Takeovers), stateful, len(rep.Takeovers)-stateful, rep.Releases, planned, counts(viaLeader), counts(why), unplanned)
	takeOvers := 0
	for _, m := range h.Members() {
		takeOvers += m.Log.Count("took over the member record of this data dir's previous run")
	}
	fmt.Fprintf(&b, "  restarts that took their live member record over (back before the session timeout): %d\n", takeOvers)
	fmt.Fprintf(&b, "  agent RSS (each run of each agent, first and last sample, max):\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "    %-3s pid %-7d %s → %s (max %s) over %s\n", r.Member, r.Pid, mb(r.First), mb(r.Last), mb(r.Max),
			r.LastAt.Sub(r.FirstAt).Round(time.Second))
	}
	fmt.Fprintf(&b, "  replay: %s", rerun)
	h.Logf("%s", b.String())
	if lost > 0 || stale > 0 {
		t.Errorf("chaos soak with seed %d: %d acknowledged commits lost, %d acknowledged to a stale owner", seed, lost, stale)
	}
}

// counts lists a count per reason, sorted, or says none.
func counts(by map[string]int) string {
	var out []string
	for w, n := range by {
		out = append(out, fmt.Sprintf("%s: %d", w, n))
	}
	if len(out) == 0 {
		return "none"
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

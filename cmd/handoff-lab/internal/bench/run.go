package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/internal/lab"
)

// coldSimLag is cold-sim's acceptable lag: any learner counts as caught up
// at its first report, so ownership moves at once and the new owner
// replays while the task waits.
const coldSimLag = 1 << 62

// modeConfig is the group config of a mode's run, or an error saying why
// the mode is unavailable.
func modeConfig(s Settings, mode string) (assign.Config, error) {
	cfg := assign.DefaultConfig()
	cfg.Stateful = []string{fmt.Sprintf("orders-0..%d", s.stateful()-1)}
	if n := s.stateless(); n > 0 {
		cfg.Stateless = []string{fmt.Sprintf("mail-0..%d", n-1)}
	}
	cfg.Standbys = s.Standbys
	cfg.MaxLearnersPerMember = s.MaxLearners
	cfg.AcceptableLag = s.AcceptableLag
	cfg.SessionTimeout = assign.Duration(s.Session)
	switch mode {
	case modeEager:
		cfg.Handover = assign.Eager
	case modeStable:
		cfg.Handover = assign.Stable
	case modeCold:
		cfg.Handover = assign.Mode(modeCold)
	case modeColdSim:
		cfg.Handover, cfg.AcceptableLag = assign.Eager, coldSimLag
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("the group config rejects it: %w", err)
	}
	return cfg, nil
}

// runMode runs the scenario in one mode on a fresh lab.
func runMode(ctx context.Context, s Settings, mode string, procs *lab.Processes, prog *progress) (modeRun, *timeline) {
	run := modeRun{Mode: mode}
	cfg, err := modeConfig(s, mode)
	if err != nil {
		run.Unavailable = err.Error()
		prog.note("%s: unavailable: %v", mode, err)
		return run, nil
	}
	run.Available = true
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	tl, err := execute(ctx, s, cfg, &run, procs, prog)
	if err != nil {
		run.Error = err.Error()
		prog.note("%s: %v", mode, err)
	}
	return run, tl
}

// execute opens the lab, runs the scenario and measures it.
func execute(ctx context.Context, s Settings, cfg assign.Config, run *modeRun, procs *lab.Processes, prog *progress) (_ *timeline, err error) {
	run.Load[0] = loadAverage()
	run.Group = "bench-" + run.Mode
	if s.NATS != "" {
		run.Group += "-" + groupSuffix()
	}
	l, err := lab.Open(ctx, lab.Options{
		Group: run.Group, NATSURL: s.NATS, Config: cfg, Keep: s.Keep, SampleEvery: s.Sample,
		Seed: s.Seed, AgentLevel: agentLevel(s), Processes: procs, MaxDelay: s.WorkerMaxDelay,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := l.Close(); cerr != nil && err == nil {
			err = cerr
		}
		if s.Keep {
			prog.note("%s: data kept in %s", run.Mode, l.Dir())
		}
	}()
	rec := l.Recorder()
	tasks, _ := cfg.Tasks()
	first := firstStateful(tasks)

	prog.phase("pre-loading state", 0.05)
	if run.History, err = l.Preload(ctx, lab.History{Keys: s.Keys, ValueSize: s.ValueSize}); err != nil {
		return nil, err
	}
	if s.Keys > 0 {
		prog.phase("measuring the raw replay ceiling and a reference restore", 0.15)
		c, err := lab.Best(3, func() (lab.Rate, error) { return l.ReplayCeiling(ctx, first) })
		if err != nil {
			return nil, err
		}
		r, err := lab.Best(3, func() (lab.Rate, error) { return l.RestoreReference(ctx, first) })
		if err != nil {
			return nil, err
		}
		run.Ceiling, run.Restore = toRateJSON(c), toRateJSON(r)
	}

	prog.phase(fmt.Sprintf("starting %d members", s.From), 0.25)
	l.Input().Start(s.Rate)
	// All at once, so that each restores only its share of the history: a
	// restore pulls up to 16 MB ahead, and one member restoring every task
	// at once can exceed what the server buffers for a client (64 MB):
	// it is cut off as a slow consumer, again and again.
	ids := MemberIDs(1, s.From)
	if err := startMembers(ctx, l, ids); err != nil {
		return nil, err
	}
	steadyFrom, err := l.WaitSteady(ctx, s.Hold, OwnedBy(ids))
	if err != nil {
		return nil, fmt.Errorf("initial balance: %w", err)
	}
	prog.phase("warming up", 0.35)
	if !group.Sleep(ctx, s.Warmup) {
		return nil, ctx.Err()
	}

	activationBefore := l.ActivationReplayed()
	prog.phase(scenarioTitle(s), 0.45)
	event := rec.Mark(scenarioTitle(s))
	if err := runScenario(ctx, s, l, prog); err != nil {
		return nil, err
	}
	end := time.Now()
	run.Load[1] = loadAverage()
	steady, ok := rec.Balanced(event)
	run.Balanced = ok
	balanced := steady.At
	if !ok {
		balanced, steady.Generation = end, rec.Generation()
	}
	run.TimeToBalancedMS = durMS(balanced.Sub(event))
	run.Generations = steady.Generation - rec.GenerationAt(event)
	if s.Scenario == scenarioScaleUp {
		run.NewcomerTasks = newcomerTasks(rec.Snapshot(), MemberIDs(s.From+1, s.To))
	}
	run.ActivationReplayedMetric = l.ActivationReplayed() - activationBefore

	prog.phase("draining the input and checking the changelog", 0.9)
	if err := l.Input().Stop(); err != nil {
		return nil, err
	}
	if err := l.Drain(ctx); err != nil {
		return nil, err
	}
	check, err := l.Check(ctx, s.Keys)
	if err != nil {
		return nil, err
	}
	run.Exact, run.Check = check.Exact, check.Summary()

	pauses := rec.Pauses(event)
	spikes := l.Spikes(steadyFrom)
	fillPauses(run, pauses, spikes, event)
	run.Breakdown = breakdown(l.Handoffs(pauses), spikes)
	run.LearnerSeconds = rec.RoleSeconds(lab.RoleLearner, event, balanced)
	run.RestoringSeconds = rec.RoleSeconds(lab.RoleRestoring, event, balanced)
	var learnerRates []float64
	for _, rp := range rec.Replays(event) {
		t := &run.ReplayedByLearners
		if rp.Role == api.RoleActive {
			t = &run.ReplayedByActivations
		}
		t.Runs++
		t.Messages += rp.Messages
		t.Records += rp.Records
		t.Bytes += rp.Bytes
		if rp.Role != api.RoleActive {
			if v := rp.CatchUpRecordsPerSecond(); v > 0 {
				learnerRates = append(learnerRates, v)
			}
		}
	}
	run.LearnerRestoreRate = median(learnerRates)
	before, _ := rec.Throughput(event.Add(-s.Warmup), event, 250*time.Millisecond)
	during, worst := rec.Throughput(event, maxTime(balanced, event.Add(250*time.Millisecond)), 250*time.Millisecond)
	run.Throughput = throughputJSON{Before: before, During: during, Worst: worst}
	if before > 0 {
		run.Throughput.DipPercent = max(0, 100*(1-worst/before))
	}

	tl := &timeline{
		From: event.Add(-time.Second), To: end, Event: event, Balanced: balanced,
		Tasks: tasks, Spans: rec.Spans(end), Marks: rec.Marks(), Pauses: pauses, Bucket: 250 * time.Millisecond,
	}
	for _, m := range l.Members() {
		tl.Members = append(tl.Members, m.ID)
	}
	for t := tl.From; t.Before(tl.To); t = t.Add(tl.Bucket) {
		avg, _ := rec.Throughput(t, t.Add(tl.Bucket), tl.Bucket)
		tl.Committed = append(tl.Committed, avg)
	}
	return tl, nil
}

// startMembers starts members together.
func startMembers(ctx context.Context, l *lab.Lab, ids []string) error {
	_, err := l.AddMembers(ctx, ids...)
	return err
}

// runScenario performs the scenario's event and waits until the group
// has settled after it.
func runScenario(ctx context.Context, s Settings, l *lab.Lab, prog *progress) error {
	switch s.Scenario {
	case scenarioScaleUp:
		if err := startMembers(ctx, l, MemberIDs(s.From+1, s.To)); err != nil {
			return err
		}
		prog.phase("waiting for balance", 0.55)
		_, err := l.WaitSteady(ctx, s.Hold, OwnedBy(MemberIDs(1, s.To)))
		return err
	case scenarioScaleDown:
		leaving := MemberIDs(s.To+1, s.From)
		for _, id := range leaving {
			if err := l.Leave(ctx, id); err != nil {
				return err
			}
		}
		prog.phase("waiting for the leaving members to hand over", 0.55)
		for _, id := range leaving {
			if err := l.WaitStopped(ctx, id); err != nil {
				return err
			}
		}
		_, err := l.WaitSteady(ctx, s.Hold, OwnedBy(MemberIDs(1, s.To)))
		return err
	case scenarioCrash:
		// The newest member that does not lead: a leader's crash would
		// add an election to the failover.
		all := MemberIDs(1, s.From)
		victim := all[len(all)-1]
		if leader := l.Recorder().Snapshot().Leader; victim == leader {
			victim = all[len(all)-2]
		}
		if err := l.Crash(victim); err != nil {
			return err
		}
		prog.phase("waiting for the failover", 0.55)
		var rest []string
		for _, id := range all {
			if id != victim {
				rest = append(rest, id)
			}
		}
		_, err := l.WaitSteady(ctx, s.Hold, OwnedBy(rest))
		return err
	case scenarioRolling:
		all := MemberIDs(1, s.From)
		for i, id := range all {
			prog.phase(fmt.Sprintf("restarting %s (%d of %d)", id, i+1, len(all)), 0.45+0.45*float64(i)/float64(len(all)))
			if err := l.Leave(ctx, id); err != nil {
				return err
			}
			if err := l.WaitStopped(ctx, id); err != nil {
				return err
			}
			if err := l.Restart(ctx, id); err != nil {
				return err
			}
			if _, err := l.WaitSteady(ctx, s.Hold, OwnedBy(all)); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown scenario %q", s.Scenario)
}

// OwnedBy holds when no task is owned outside members and, when there are
// enough stateful tasks for it, every member owns one: the assignor
// balances stateful and stateless tasks separately.
func OwnedBy(members []string) func(lab.Snapshot) bool {
	want := map[string]bool{}
	for _, m := range members {
		want[m] = true
	}
	return func(s lab.Snapshot) bool {
		got := map[string]bool{}
		stateful := 0
		for _, t := range s.Tasks {
			if !want[t.Owner] {
				return false
			}
			if t.Stateful {
				stateful++
				got[t.Owner] = true
			}
		}
		return stateful < len(members) || len(got) == len(members)
	}
}

// MemberID is the i-th member's ID: m<i>.
func MemberID(i int) string { return "m" + strconv.Itoa(i) }

// MemberIDs returns m<from> ... m<to>, the bench's and the demo's member IDs.
func MemberIDs(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, MemberID(i))
	}
	return out
}

func firstStateful(tasks []assign.Task) string {
	for _, t := range tasks {
		if t.Stateful {
			return t.ID
		}
	}
	return ""
}

func scenarioTitle(s Settings) string {
	switch s.Scenario {
	case scenarioScaleUp, scenarioScaleDown:
		return fmt.Sprintf("%s %d→%d", s.Scenario, s.From, s.To)
	case scenarioCrash:
		return fmt.Sprintf("crash of a member that does not lead (%d→%d)", s.From, s.From-1)
	}
	return fmt.Sprintf("rolling restart of %d members", s.From)
}

// loadAverage is the machine's 1-minute load average (0 where unknown):
// other processes on the machine slow every figure down.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func groupSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// newcomerTasks is the most stateful tasks one of newcomers owns in snap.
func newcomerTasks(snap lab.Snapshot, newcomers []string) int {
	n := map[string]int{}
	for _, t := range snap.Tasks {
		if t.Stateful && slices.Contains(newcomers, t.Owner) {
			n[t.Owner]++
		}
	}
	most := 0
	for _, c := range n {
		most = max(most, c)
	}
	return most
}

// agentLevel is the agents' log level (checked by parse).
func agentLevel(s Settings) zerolog.Level {
	l, err := zerolog.ParseLevel(s.AgentLevel)
	if err != nil {
		return zerolog.InfoLevel
	}
	return l
}

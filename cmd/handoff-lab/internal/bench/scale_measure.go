package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/internal/poll"
)

// measureScale forms a group of n members, measures it idle, then runs
// each event of --events on it.
func measureScale(ctx context.Context, s Settings, bin string, n int, stderr io.Writer) (size scaleSize) {
	size = scaleSize{Members: n, Tasks: s.Tasks, SessionTimeoutMS: durMS(s.Session)}
	size.Load[0] = loadAverage()
	defer func() { size.Load[1] = loadAverage() }()
	fail := func(err error) scaleSize {
		size.Error = err.Error()
		return size
	}
	dir, err := os.MkdirTemp("", "handoff-scale-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	g, err := openScaleGroup(ctx, s, bin, dir, n)
	if err != nil {
		return fail(err)
	}
	if s.Out != "" {
		f, err := os.Create(filepath.Join(s.Out, fmt.Sprintf("agents-%d.log", n)))
		if err != nil {
			g.close()
			return fail(fmt.Errorf("agents' log: %w", err))
		}
		g.log.all = bufio.NewWriterSize(f, 1<<20)
		defer f.Close()
	}
	defer func() {
		g.close()
		g.log.mu.Lock()
		size.Warnings, size.FirstWarning = g.log.warnings, g.log.first
		if g.log.all != nil {
			if err := g.log.all.Flush(); err != nil && size.Error == "" {
				size.Error = fmt.Sprintf("agents' log: %v", err)
			}
		}
		g.log.mu.Unlock()
	}()
	say := func(format string, args ...any) {
		fmt.Fprintf(stderr, "bench: scale %d: "+format+"\n", append([]any{n}, args...)...)
	}

	// Form the group, a batch at a time, while the lab holds the lease:
	// the first leader then plans with every member, and places each task
	// once instead of moving thousands through learners as members join.
	t0 := time.Now()
	hold, err := g.holdLease(ctx)
	if err != nil {
		return fail(fmt.Errorf("hold the lease while the group forms: %w", err))
	}
	for started := 0; started < n; {
		batch := min(s.Scale.Batch, n-started)
		if err := g.start(ctx, g.newIDs(batch)); err != nil {
			return fail(fmt.Errorf("start members: %w", err))
		}
		started += batch
		say("%d members started (%s)", started, time.Since(t0).Round(time.Millisecond))
	}
	if err := hold(); err != nil {
		return fail(fmt.Errorf("give up the lease: %w", err))
	}
	if _, err := g.waitBalanced(ctx); err != nil {
		return fail(fmt.Errorf("form the group: %w (%v)", err, g.isBalanced()))
	}
	size.FormedMS = durMS(time.Since(t0))
	say("balanced after %s", time.Since(t0).Round(time.Millisecond))
	if !group.Sleep(ctx, s.Scale.Settle) {
		return fail(ctx.Err())
	}

	// Idle.
	if err := measureIdle(ctx, g, &size); err != nil {
		return fail(fmt.Errorf("idle: %w", err))
	}
	say("idle: %.3f %% of a core and %.2f messages a second per member", size.IdleCPUPerMemberPct, size.IdleMsgsPerMemberPerSec)
	if last, ok := g.gens.last(); ok {
		size.GenerationBytes = last.bytes
	}

	// Events.
	pubMark := g.log.mark()
	for _, name := range s.Scale.Events {
		ev := runScaleEvent(ctx, g, name)
		size.Events = append(size.Events, ev)
		if ev.Name == eventKillLeader {
			size.LeaderFailoverMS = ev.LeaderMS
		}
		say("%s: balanced %v after %.0f ms, %d generations, %d moves%s", name, ev.Balanced, ev.TimeToBalancedMS, ev.Generations, ev.Moves, errNote(ev.Error))
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
	}
	var plans, pubs []time.Duration
	for _, p := range g.log.since(pubMark) {
		plans = append(plans, msDuration(p.Plan))
		pubs = append(pubs, msDuration(p.Publish))
	}
	size.PlanMS, size.GenerationPublishMS = PauseStatsOf(plans), PauseStatsOf(pubs)
	size.FailoverMS = PauseStatsOf(g.failovers)
	return size
}

func errNote(e string) string {
	if e == "" {
		return ""
	}
	return " (" + e + ")"
}

// measureIdle measures the balanced group at rest for --idle.
func measureIdle(ctx context.Context, g *scaleGroup, size *scaleSize) error {
	s := g.s
	leader := g.leader()
	if leader == nil {
		return errors.New("no leader")
	}
	if s.Scale.Profile != "" {
		if err := os.MkdirAll(s.Scale.Profile, 0o755); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(s.Scale.Profile, fmt.Sprintf("idle-%d.pprof", size.Members)))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	before, _, err := g.connz(ctx)
	if err != nil && len(g.servers) > 0 {
		return err
	}
	main0 := map[string][2]uint64{}
	for _, m := range g.live() {
		st := m.local.NC.Stats()
		main0[m.id] = [2]uint64{st.InBytes, st.InMsgs}
	}
	cpu0, srv0, t0 := selfCPU(), g.serverCPU(), time.Now()
	if !group.Sleep(ctx, s.Scale.Idle) {
		return ctx.Err()
	}
	cpu1, srv1, secs := selfCPU(), g.serverCPU(), time.Since(t0).Seconds()
	var mainBytes, mainMsgs []float64
	for _, m := range g.live() {
		if b, ok := main0[m.id]; ok {
			st := m.local.NC.Stats()
			mainBytes = append(mainBytes, float64(st.InBytes-b[0])/secs)
			mainMsgs = append(mainMsgs, float64(st.InMsgs-b[1])/secs)
		}
	}
	g.idleIn = [2]float64{median(mainBytes), median(mainMsgs)}
	after, conns, err := g.connz(ctx)
	if err != nil && len(g.servers) > 0 {
		return err
	}
	members := len(g.live())
	idle := &size.Idle
	idle.Seconds = secs
	idle.CPUPerMemberPct = 100 * (cpu1 - cpu0).Seconds() / secs / float64(members)
	idle.ServerCPUPct = 100 * (srv1 - srv0).Seconds() / secs
	idle.Connections = conns
	var rates []traffic
	for id, a := range after {
		b, ok := before[id]
		if !ok {
			continue
		}
		t := traffic{
			MsgsOut: float64(a.msgsOut-b.msgsOut) / secs, MsgsIn: float64(a.msgsIn-b.msgsIn) / secs,
			BytesOut: float64(a.bytesOut-b.bytesOut) / secs, BytesIn: float64(a.bytesIn-b.bytesIn) / secs,
		}
		if id == leader.id {
			idle.Leader = t
			continue
		}
		rates = append(rates, t)
	}
	if len(rates) > 0 {
		slices.SortFunc(rates, func(a, b traffic) int {
			switch {
			case a.msgs() < b.msgs():
				return -1
			case a.msgs() > b.msgs():
				return 1
			}
			return 0
		})
		idle.Member, idle.MemberMax = rates[len(rates)/2], rates[len(rates)-1]
	}
	if len(g.servers) > 0 {
		if idle.KVConsumers, idle.LogConsumers, err = g.consumers(ctx); err != nil {
			return err
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	size.HeapPerMemberBytes = float64(ms.HeapAlloc) / float64(members)
	size.IdleCPUPerMemberPct = idle.CPUPerMemberPct
	size.IdleMsgsPerMemberPerSec = idle.Member.msgs()
	return nil
}

// runScaleEvent runs one event on the balanced group and measures it
// until the group is balanced again.
func runScaleEvent(ctx context.Context, g *scaleGroup, name string) (ev scaleEvent) {
	ev.Name = name
	members := g.live()
	k := 1
	if name == eventJoinTenth || name == eventLeaveTenth {
		k = max(1, len(members)/10)
	}
	// The members the event names (those that leave or are killed).
	var named []*scaleMember
	switch name {
	case eventLeaveOne, eventLeaveTenth, eventKillOne:
		named = g.followers(k)
	case eventKillLeader:
		if m := g.leader(); m != nil {
			named = []*scaleMember{m}
		}
	}
	ev.Count = k
	if name != eventJoinOne && name != eventJoinTenth {
		if len(named) == 0 {
			ev.Error = "no member to " + name
			return ev
		}
		ev.Count = len(named)
	}
	// The others' received bytes and messages are counted from here on.
	bystanders := map[string]*scaleMember{}
	for _, m := range members {
		bystanders[m.id] = m
	}
	for _, m := range named {
		delete(bystanders, m.id)
	}
	stats0 := map[string][2]uint64{}
	for id, m := range bystanders {
		st := m.local.NC.Stats()
		stats0[id] = [2]uint64{st.InBytes, st.InMsgs}
	}
	g.rec.take()
	genMark, pubMark := g.gens.mark(), g.log.mark()
	var (
		oldLeader string
		killedAt  time.Time
		finish    func() error
	)
	t0 := time.Now()
	switch name {
	case eventJoinOne, eventJoinTenth:
		if err := g.start(ctx, g.newIDs(k)); err != nil {
			ev.Error = err.Error()
			return ev
		}
	case eventLeaveOne, eventLeaveTenth:
		finish = g.leave(ctx, named)
	case eventKillOne, eventKillLeader:
		if name == eventKillLeader {
			oldLeader = named[0].id
		}
		_, killedAt = g.kill(named[0])
	}
	var errs []error
	if finish != nil {
		if err := finish(); err != nil {
			errs = append(errs, err)
		}
	}
	if oldLeader != "" {
		err := poll.Until(ctx, 5*time.Millisecond, func() error {
			for _, gs := range g.gens.since(genMark) {
				if gs.leader != oldLeader {
					ev.LeaderMS = durMS(gs.at.Sub(killedAt))
					return nil
				}
			}
			return errors.New("no generation of a new leader yet")
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	at, err := g.waitBalanced(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("not balanced: %w", err))
	} else {
		ev.Balanced = true
		ev.TimeToBalancedMS = durMS(at.Sub(t0))
	}
	if len(errs) > 0 {
		ev.Error = errors.Join(errs...).Error()
	}
	gens := g.gens.since(genMark)
	ev.Generations = uint64(len(gens))
	var plans, pubs []time.Duration
	for _, p := range g.log.since(pubMark) {
		plans = append(plans, msDuration(p.Plan))
		pubs = append(pubs, msDuration(p.Publish))
		ev.Writes += p.Writes
	}
	ev.PlanMS, ev.PublishMS = PauseStatsOf(plans), PauseStatsOf(pubs)
	moves, pauses, commits, failovers := g.rec.take()
	ev.Moves = moves
	ev.PauseMS, ev.FirstCommitMS, ev.FailoverMS = PauseStatsOf(pauses), PauseStatsOf(commits), PauseStatsOf(failovers)
	g.failovers = append(g.failovers, failovers...)
	if len(gens) > 0 {
		// What a bystander received beyond its idle traffic over the
		// event, per generation.
		took := time.Since(t0).Seconds()
		n := float64(len(gens))
		var perGen []float64
		var msgs []float64
		for id, m := range bystanders {
			b0, ok := stats0[id]
			if !ok {
				continue
			}
			st := m.local.NC.Stats()
			perGen = append(perGen, max(0, float64(st.InBytes-b0[0])-g.idleIn[0]*took)/n)
			msgs = append(msgs, max(0, float64(st.InMsgs-b0[1])-g.idleIn[1]*took)/n)
		}
		if len(perGen) > 0 {
			slices.Sort(perGen)
			ev.BytesInPerGeneration, ev.BytesInPerGenerationMax = median(perGen), perGen[len(perGen)-1]
			ev.MsgsInPerGeneration = median(msgs)
		}
	}
	return ev
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

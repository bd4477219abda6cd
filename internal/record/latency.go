package record

import (
	"sort"
	"time"

	"github.com/handoffhq/handoff/client"
)

// Input is one input message as the generator published it.
type Input struct {
	Task      string
	Seq       uint64    // its input stream sequence
	Published time.Time // before its first publish attempt
}

// Latency is what one input message's user waited: from its publish to the
// acknowledgement of the first commit of its task whose checkpoint reached
// it (the worker's commit event: its time is when the commit call
// returned, its checkpoint the input sequence the commit reached).
type Latency struct {
	Input
	Acked   time.Time
	Latency time.Duration
}

// Latencies returns the latency of every message in inputs that a commit
// in events acknowledged, in the order of inputs; a message no commit
// reached is left out.
func Latencies(inputs []Input, events []Event) []Latency {
	type commit struct {
		checkpoint uint64
		at         time.Time
	}
	commits := map[string][]commit{}
	for _, e := range events {
		if e.Type == client.EventCommit {
			commits[e.Task] = append(commits[e.Task], commit{e.Checkpoint, e.Time})
		}
	}
	// earliest[t][i] is the earliest acknowledgement of the commits of t
	// from the i-th lowest checkpoint up: a message is acknowledged by the
	// first commit, in time, whose checkpoint reaches it.
	earliest := map[string][]time.Time{}
	for task, cs := range commits {
		sort.Slice(cs, func(i, j int) bool { return cs[i].checkpoint < cs[j].checkpoint })
		ts := make([]time.Time, len(cs))
		for i := len(cs) - 1; i >= 0; i-- {
			ts[i] = cs[i].at
			if i+1 < len(cs) && ts[i+1].Before(ts[i]) {
				ts[i] = ts[i+1]
			}
		}
		commits[task], earliest[task] = cs, ts
	}
	var out []Latency
	for _, in := range inputs {
		cs := commits[in.Task]
		i := sort.Search(len(cs), func(i int) bool { return cs[i].checkpoint >= in.Seq })
		if i == len(cs) {
			continue
		}
		acked := earliest[in.Task][i]
		out = append(out, Latency{Input: in, Acked: acked, Latency: acked.Sub(in.Published)})
	}
	return out
}

// SpikeLead is how long before the old owner's worker stopped a task the
// messages "around" its move begin: a message published just before the
// stop may not have been read by then, and waits for the next owner.
const SpikeLead = 50 * time.Millisecond

// Spike is what one move cost its task's events: the worst latency of the
// messages published around the move, from SpikeLead before the old
// owner's worker stopped the task to the new owner's first acknowledged
// commit (the messages the move can delay), over the task's steady p50
// latency.
type Spike struct {
	Pause       Pause
	FirstCommit time.Time
	// Messages were published around the move; Worst is their worst
	// latency.
	Messages int
	Worst    time.Duration
	// Steady is the p50 latency of the task's SteadyMessages: those
	// published from steadyFrom on and around none of its moves (every
	// task's, where the task has none).
	Steady         time.Duration
	SteadyMessages int
	// Excess is Worst − Steady, or 0 if the worst was no worse.
	Excess time.Duration
}

// Spikes measures every move among pauses (Pause.Moved). The steady
// latency of a task comes from its messages published at or after
// steadyFrom, outside the window of every one of its pauses in pauses
// (from SpikeLead before the pause's start to its new owner's first
// commit, or to its end if there is none); a task with no steady message
// of its own (a low input rate per task) is measured against the steady
// p50 of every task's. A move whose new owner has not committed, or none
// of whose messages were published around it, has no spike and is left
// out.
func Spikes(pauses []Pause, lats []Latency, events []Event, steadyFrom time.Time) []Spike {
	type window struct{ from, to time.Time }
	windows := map[string][]window{}
	firsts := make([]time.Time, len(pauses))
	for i, p := range pauses {
		to := p.Start.Add(p.Duration)
		if p.Moved() {
			firsts[i] = firstCommit(events, p)
			if !firsts[i].IsZero() {
				to = firsts[i]
			}
		}
		windows[p.Task] = append(windows[p.Task], window{p.Start.Add(-SpikeLead), to})
	}
	byTask := map[string][]Latency{}
	for _, l := range lats {
		byTask[l.Task] = append(byTask[l.Task], l)
	}
	steady := map[string][]time.Duration{}
	var everyTask []time.Duration // the steady latencies of every task
	for task, ls := range byTask {
		for _, l := range ls {
			if l.Published.Before(steadyFrom) {
				continue
			}
			around := false
			for _, w := range windows[task] {
				if !l.Published.Before(w.from) && !l.Published.After(w.to) {
					around = true
					break
				}
			}
			if !around {
				steady[task] = append(steady[task], l.Latency)
				everyTask = append(everyTask, l.Latency)
			}
		}
	}
	var out []Spike
	for i, p := range pauses {
		base := steady[p.Task]
		if len(base) == 0 {
			base = everyTask
		}
		if !p.Moved() || firsts[i].IsZero() || len(base) == 0 {
			continue
		}
		s := Spike{Pause: p, FirstCommit: firsts[i], SteadyMessages: len(base)}
		from := p.Start.Add(-SpikeLead)
		for _, l := range byTask[p.Task] {
			if !l.Published.Before(from) && !l.Published.After(s.FirstCommit) {
				s.Messages++
				s.Worst = max(s.Worst, l.Latency)
			}
		}
		if s.Messages == 0 {
			continue
		}
		s.Steady = Percentile(base, 50)
		s.Excess = max(0, s.Worst-s.Steady)
		out = append(out, s)
	}
	return out
}

// firstCommit is the new owner's first acknowledged commit of the task
// after the pause ended (zero if none).
func firstCommit(events []Event, p Pause) time.Time {
	var first time.Time
	for _, e := range events {
		if e.Type == client.EventCommit && e.Task == p.Task && e.Member == p.To && e.Epoch == p.Epoch && !e.Time.Before(p.End) &&
			(first.IsZero() || e.Time.Before(first)) {
			first = e.Time
		}
	}
	return first
}

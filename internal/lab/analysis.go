package lab

import (
	"sort"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/record"
)

// WorkerEvents returns every worker event, in time order.
func (r *Recorder) WorkerEvents() []record.Event {
	r.mu.Lock()
	out := append([]record.Event(nil), r.events...)
	r.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// Marks returns the operations and milestones, in time order.
func (r *Recorder) Marks() []Mark {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Mark(nil), r.marks...)
}

// Pauses returns the pauses whose release or crash was at or after since,
// paired by record.Pauses and record.Failovers (the crashes and stops
// without a leave are the recorder's marks), in the order they began. An
// overlap (record.Pause.Overlapped) is no pause and is left out.
func (r *Recorder) Pauses(since time.Time) []record.Pause {
	events := r.WorkerEvents()
	now := time.Now()
	var out []record.Pause
	for _, p := range record.Pauses(events, now) {
		if !p.Released.Before(since) && !p.Overlapped {
			out = append(out, p)
		}
	}
	for _, m := range r.Marks() {
		if (m.Kind == MarkCrash || m.Kind == MarkStop) && !m.At.Before(since) {
			out = append(out, record.Failovers(events, m.Member, m.At, now)...)
		}
	}
	for i := range out {
		out[i].Stateful = r.stateful[out[i].Task]
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// SteadyChanges returns the changes of steadiness, in time order.
func (r *Recorder) SteadyChanges() []SteadyChange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]SteadyChange(nil), r.steady...)
}

// Balanced returns when the group last became steady, and at which
// generation, if it is steady now and became so at or after after: the
// first moment from which every task was active on its final owner, its
// worker running, with nothing in flight. Its precision is the sampling
// interval, or better when a worker start ended the move.
// A group that stayed steady throughout is balanced at after itself.
func (r *Recorder) Balanced(after time.Time) (SteadyChange, bool) {
	ch := r.SteadyChanges()
	if len(ch) == 0 || !ch[len(ch)-1].Steady {
		return SteadyChange{}, false
	}
	last := ch[len(ch)-1]
	if last.At.Before(after) {
		last.At, last.Generation = after, r.Generation()
	}
	return last, true
}

// Generations returns the generation changes, in time order.
func (r *Recorder) Generations() []GenChange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]GenChange(nil), r.gens...)
}

// GenerationAt is the highest generation applied at time t.
func (r *Recorder) GenerationAt(t time.Time) uint64 {
	var g uint64
	for _, c := range r.Generations() {
		if c.At.After(t) {
			break
		}
		g = c.Generation
	}
	return g
}

// Spans returns every role span; open ones end at until.
func (r *Recorder) Spans(until time.Time) []Span {
	r.mu.Lock()
	out := append([]Span(nil), r.spans...)
	for _, sp := range r.open {
		s := *sp
		s.End = until
		out = append(out, s)
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Task != out[j].Task {
			return out[i].Task < out[j].Task
		}
		return out[i].Start.Before(out[j].Start)
	})
	return out
}

// RoleSeconds sums the time spent in role by any member on any task within
// [from, to]: learner-seconds are the double work of warming up,
// restoring-seconds the time new owners replayed before they could serve.
func (r *Recorder) RoleSeconds(role string, from, to time.Time) float64 {
	var s float64
	for _, sp := range r.Spans(to) {
		if sp.Role != role {
			continue
		}
		a, b := maxTime(sp.Start, from), minTime(sp.End, to)
		if b.After(a) {
			s += b.Sub(a).Seconds()
		}
	}
	return s
}

// Throughput is how many input messages per second the workers committed
// within [from, to), on average and in the slowest window of width bucket.
func (r *Recorder) Throughput(from, to time.Time, bucket time.Duration) (avg, worst float64) {
	if !to.After(from) {
		return 0, 0
	}
	n := int(to.Sub(from)/bucket) + 1
	counts := make([]int, n)
	total := 0
	for _, e := range r.WorkerEvents() {
		if e.Type != client.EventCommit || e.Time.Before(from) || !e.Time.Before(to) {
			continue
		}
		counts[int(e.Time.Sub(from)/bucket)] += e.Records
		total += e.Records
	}
	avg = float64(total) / to.Sub(from).Seconds()
	full := int(to.Sub(from) / bucket) // the last bucket may be partial: skip it
	worst = -1
	for i := 0; i < full; i++ {
		if v := float64(counts[i]) / bucket.Seconds(); worst < 0 || v < worst {
			worst = v
		}
	}
	if worst < 0 {
		worst = avg
	}
	return avg, worst
}

// Replay is one restore run of a task on a member that replayed changelog
// messages: a learner's or standby's tail, or an activation's catch-up.
type Replay struct {
	Task   string `json:"task"`
	Member string `json:"member"`
	// Role is the member's role when the run started: learner or standby
	// (warm-up), active (an activation: the task waited for it).
	Role string `json:"role"`
	// Messages, Records and Bytes were replayed within the window asked
	// for; Records and Bytes come from the changelog (Check reads it).
	Messages uint64    `json:"messages"`
	Records  uint64    `json:"records"`
	Bytes    uint64    `json:"bytes"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
	// PeakRate is the highest rate the run reported, messages per second
	// (the agent's rate spans the last few seconds).
	PeakRate float64 `json:"peakRate"`
	// CatchUp is how long the run took from its first report to its first
	// caught-up one, having replayed CatchUpMessages by then; zero if it
	// never caught up or had nothing to replay.
	CatchUp         time.Duration `json:"catchUp"`
	CatchUpMessages uint64        `json:"catchUpMessages"`
}

// CatchUpRecordsPerSecond is the run's replay rate until it caught up, in
// records, assuming its records were spread evenly over its messages.
func (rp Replay) CatchUpRecordsPerSecond() float64 {
	if rp.CatchUp <= 0 || rp.Messages == 0 {
		return 0
	}
	records := float64(rp.CatchUpMessages) * float64(rp.Records) / float64(rp.Messages)
	return records / rp.CatchUp.Seconds()
}

// Replays returns the restore runs that replayed messages at or after
// since, from the progress reports (each run starts reporting 0 replayed).
func (r *Recorder) Replays(since time.Time) []Replay {
	r.mu.Lock()
	reports := append([]Report(nil), r.reports...)
	logs := r.logs
	r.mu.Unlock()
	byPair := map[pair][]Report{}
	var order []pair
	for _, rep := range reports {
		k := pair{rep.Task, rep.Member}
		if _, ok := byPair[k]; !ok {
			order = append(order, k)
		}
		byPair[k] = append(byPair[k], rep)
	}
	var out []Replay
	for _, k := range order {
		reps := byPair[k]
		start := 0
		for i := 1; i <= len(reps); i++ {
			if i < len(reps) && reps[i].Replayed >= reps[i-1].Replayed {
				continue
			}
			if rp, ok := replayOf(reps[start:i], since, logs[k.task]); ok {
				out = append(out, rp)
			}
			start = i
		}
	}
	return out
}

// replayOf summarizes one run's reports, counting what it replayed at or
// after since.
func replayOf(run []Report, since time.Time, log []changelog.Record) (Replay, bool) {
	first, last := run[0], run[len(run)-1]
	var before uint64
	for _, rep := range run {
		if rep.Heard.Before(since) {
			before = rep.Replayed
		}
	}
	if last.Replayed <= before {
		return Replay{}, false
	}
	rp := Replay{Task: first.Task, Member: first.Member, Role: first.Role, Messages: last.Replayed - before, First: first.Heard, Last: last.Heard}
	if rp.Role == "" {
		rp.Role = api.RoleLearner
	}
	for _, rep := range run {
		rp.PeakRate = max(rp.PeakRate, rep.Rate)
		if rp.CatchUp == 0 && rep.Lag == 0 && rep.Replayed > 0 {
			rp.CatchUp, rp.CatchUpMessages = rep.Heard.Sub(first.Heard), rep.Replayed
		}
	}
	// The run applied its messages in order up to last.Applied: the ones
	// counted are the last Messages of the task's log up to there.
	end := sort.Search(len(log), func(i int) bool { return log[i].Seq > last.Applied })
	for i := max(end-int(rp.Messages), 0); i < end; i++ {
		e := log[i].Entry
		rp.Records += uint64(len(e.Puts) + len(e.Deletes))
		rp.Bytes += uint64(changelog.EncodedLen(e))
	}
	return rp, true
}

// setLog keeps a task's changelog, read by Check, for Replays.
func (r *Recorder) setLog(task string, recs []changelog.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logs == nil {
		r.logs = map[string][]changelog.Record{}
	}
	r.logs[task] = recs
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Spikes measures what every move since steadyFrom cost its task's events
// (record.Spikes): each stateful input message's latency, from the
// generator's publish to the acknowledgement of the commit that holds it,
// around the move, over the task's steady p50 latency from steadyFrom on.
// Both times are this machine's wall clock: the generator's in this
// process, the worker's where it runs (this process, or a worker process
// whose events carry them). Call it after Drain, so that every message has
// been acknowledged.
func (l *Lab) Spikes(steadyFrom time.Time) []record.Spike {
	events := l.rec.WorkerEvents()
	var inputs []record.Input
	for _, t := range l.rec.tasks {
		if t.Stateful {
			inputs = append(inputs, l.input.Inputs(t.ID)...)
		}
	}
	return record.Spikes(l.rec.Pauses(steadyFrom), record.Latencies(inputs, events), events, steadyFrom)
}

package record

import (
	"fmt"
	"sort"
	"time"

	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/countworker"
)

// Event is one step of a task's life on a worker: the JSON line
// examples/counter writes with --events, plus the member it ran on.
type Event struct {
	Member string           `json:"-"`
	Time   time.Time        `json:"t"`
	Type   client.EventType `json:"event"` // client.Event*
	Task   string           `json:"task"`
	Epoch  uint64           `json:"epoch"`
	// Seq is the changelog sequence of a commit, or of the last commit
	// before a release.
	Seq uint64 `json:"seq"`
	// Checkpoint is the input sequence a commit reached, or a start
	// resumes after.
	Checkpoint uint64 `json:"checkpoint"`
	Records    int    `json:"records"`
	Code       string `json:"code"`
}

// Acks returns the commits the events say were acknowledged.
func Acks(events []Event) []Acked {
	var out []Acked
	for _, e := range events {
		if e.Type == client.EventCommit {
			out = append(out, Acked{Task: e.Task, Seq: e.Seq, Epoch: e.Epoch})
		}
	}
	return out
}

// Kinds of Pause.
const (
	PausePlanned  = "planned"  // after the previous owner's release
	PauseFailover = "failover" // after the previous owner crashed or stopped without a leave
)

// Pause is a stretch during which no worker ran a task while it moved:
// from the previous owner's worker stopping it (or the previous owner's
// crash) to the next owner's worker starting it.
type Pause struct {
	Task     string `json:"task"`
	Stateful bool   `json:"stateful"` // set by the caller, which knows the tasks
	Kind     string `json:"kind"`
	From     string `json:"from"`
	To       string `json:"to,omitempty"`
	// Epoch is the epoch the start that ended the pause ran.
	Epoch uint64 `json:"epoch,omitempty"`
	// Start is when the pause began: a planned one when the old owner's
	// worker stopped the task to release it (Released is when its release
	// call returned, which a direct hand-off's next owner need not wait
	// for), a failover when its member crashed or stopped.
	Start    time.Time     `json:"start"`
	Released time.Time     `json:"released,omitzero"`
	End      time.Time     `json:"end,omitzero"`
	Duration time.Duration `json:"duration"`
	// Unfinished pauses had not ended when the events were read; their
	// Duration runs to then.
	Unfinished bool `json:"unfinished,omitempty"`
	// Overlapped is a release whose next owner had started the task before
	// the old owner's worker stopped it: an old owner that heard of the
	// move only after the leader had given the task away (its release
	// timeout). There was no pause (Duration 0; End is the next owner's
	// start); the two ran the task at once, which Overlaps reports.
	Overlapped bool `json:"overlapped,omitempty"`
}

// Moved reports whether the pause ended on another member: a hand-off
// (a move called off ends on the member it began on; an overlap had no
// pause).
func (p Pause) Moved() bool { return !p.Unfinished && !p.Overlapped && p.To != "" && p.To != p.From }

// Pauses pairs each release in events with the start that ends its pause,
// by one rule: the first start of the same task, at or after the old
// owner's worker stopped it (StoppedAt), that runs a later epoch (the next
// owner) or the same epoch on the same member (the move was called off
// and the owner serves the task again). A release that no such start
// followed is returned Overlapped if another member had started the task
// at a later epoch while the old owner still ran it, and Unfinished
// otherwise, its Duration running to until. Pauses come in the order of
// their releases; events may come in any order.
func Pauses(events []Event, until time.Time) []Pause {
	events = byTime(events)
	var out []Pause
	for _, r := range events {
		if r.Type != client.EventRelease {
			continue
		}
		p := Pause{Task: r.Task, Kind: PausePlanned, From: r.Member, Start: StoppedAt(events, r), Released: r.Time}
		p = ended(events, p, r.Epoch, true, until)
		if p.Unfinished {
			p = overlapped(events, p, r.Epoch)
		}
		out = append(out, p)
	}
	return out
}

// overlapped marks the unfinished pause p Overlapped when another member
// started its task at an epoch above epoch before p.Start; events are in
// time order.
func overlapped(events []Event, p Pause, epoch uint64) Pause {
	for _, e := range events {
		if !e.Time.Before(p.Start) {
			break
		}
		if e.Type == client.EventStart && e.Task == p.Task && e.Epoch > epoch && e.Member != p.From {
			p.Unfinished, p.Overlapped = false, true
			p.To, p.Epoch, p.End, p.Duration = e.Member, e.Epoch, e.Time, 0
			return p
		}
	}
	return p
}

// Failovers returns the pauses of the tasks member's worker ran at time at
// (when the member crashed or stopped without a leave): each ends at the
// first start of its task at or after at that runs a later epoch.
func Failovers(events []Event, member string, at, until time.Time) []Pause {
	events = byTime(events)
	running := map[string]uint64{}
	var order []string
	for _, e := range events {
		if e.Member != member || e.Time.After(at) {
			continue
		}
		switch e.Type {
		case client.EventStart:
			if _, ok := running[e.Task]; !ok {
				order = append(order, e.Task)
			}
			running[e.Task] = e.Epoch
		case client.EventStop:
			if running[e.Task] == e.Epoch {
				delete(running, e.Task)
			}
		}
	}
	var out []Pause
	for _, task := range order {
		epoch, ok := running[task]
		if !ok {
			continue
		}
		p := Pause{Task: task, Kind: PauseFailover, From: member, Start: at}
		out = append(out, ended(events, p, epoch, false, until))
	}
	return out
}

// ended ends p at the first start of its task at or after p.Start that
// counts: at an epoch above epoch, or (sameEpoch) at epoch on p.From.
// events are in time order.
func ended(events []Event, p Pause, epoch uint64, sameEpoch bool, until time.Time) Pause {
	for _, e := range events {
		if e.Type != client.EventStart || e.Task != p.Task || e.Time.Before(p.Start) {
			continue
		}
		if e.Epoch > epoch || sameEpoch && e.Epoch == epoch && e.Member == p.From {
			p.To, p.Epoch, p.End, p.Duration = e.Member, e.Epoch, e.Time, e.Time.Sub(p.Start)
			return p
		}
	}
	p.Unfinished, p.Duration = true, until.Sub(p.Start)
	return p
}

// byTime returns events in time order (a copy, stable for equal times).
func byTime(events []Event) []Event {
	if sort.SliceIsSorted(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) }) {
		return events
	}
	out := append([]Event(nil), events...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// StoppedAt returns when the worker that made release r stopped its task:
// the time of the last stop of the same task, member and epoch at or before
// the release, or the release's own time when there is none (a revoked task
// that never ran there).
func StoppedAt(events []Event, r Event) time.Time {
	at := r.Time
	for _, e := range events {
		if e.Type == client.EventStop && e.Member == r.Member && e.Task == r.Task && e.Epoch == r.Epoch && !e.Time.After(r.Time) {
			at = e.Time
		}
	}
	return at
}

// Overlaps reports every time two members ran the same task at once: a
// member runs a task from its first start at an epoch to its stop at that
// epoch (to the end of the events if it never stopped). Planned hand-offs
// never overlap (the next owner starts after the release, which follows
// the stop); a crashed or paused owner may, fenced by the changelog.
func Overlaps(events []Event) []string {
	type span struct {
		member     string
		epoch      uint64
		start, end time.Time
		open       bool
	}
	type key struct {
		task, member string
		epoch        uint64
	}
	spans := map[key]*span{}
	byTask := map[string][]*span{}
	for _, e := range events {
		k := key{e.Task, e.Member, e.Epoch}
		switch e.Type {
		case client.EventStart:
			if s, ok := spans[k]; ok {
				if !s.open {
					// Started again at the same epoch after a stop (the
					// view dropped and gave the task back): a new span.
					ns := &span{member: e.Member, epoch: e.Epoch, start: e.Time, open: true}
					spans[k] = ns
					byTask[e.Task] = append(byTask[e.Task], ns)
				}
				continue // a restart after a failure continues the span
			}
			s := &span{member: e.Member, epoch: e.Epoch, start: e.Time, open: true}
			spans[k] = s
			byTask[e.Task] = append(byTask[e.Task], s)
		case client.EventStop:
			if s, ok := spans[k]; ok && s.open {
				s.end, s.open = e.Time, false
			}
		}
	}
	var out []string
	tasks := make([]string, 0, len(byTask))
	for t := range byTask {
		tasks = append(tasks, t)
	}
	sort.Strings(tasks)
	for _, task := range tasks {
		ss := byTask[task]
		for i, a := range ss {
			for _, b := range ss[i+1:] {
				if a.member == b.member {
					continue
				}
				aEnd, bEnd := a.end, b.end
				if a.open {
					aEnd = time.Unix(1<<40, 0)
				}
				if b.open {
					bEnd = time.Unix(1<<40, 0)
				}
				if a.start.Before(bEnd) && b.start.Before(aEnd) {
					out = append(out, fmt.Sprintf("%s ran on %s (epoch %d, from %s) and on %s (epoch %d, from %s) at once",
						task, a.member, a.epoch, a.start.Format(timeFormat), b.member, b.epoch, b.start.Format(timeFormat)))
				}
			}
		}
	}
	return out
}

const timeFormat = "15:04:05.000000"

// Percentile returns the p-th percentile (0 <= p <= 100) of ds by the
// nearest-rank method, or 0 for none. ds is not modified.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(p/100*float64(len(s))+0.999999) - 1
	rank = max(0, min(rank, len(s)-1))
	return s[rank]
}

// WorkerEvent is e, an event a counter worker of member passed in process
// (countworker.Options.OnEvent), as the event log would have written it.
func WorkerEvent(member string, e countworker.Event) Event {
	return Event{Member: member, Time: e.Time, Type: e.Kind, Task: e.Task, Epoch: e.Epoch, Seq: e.Seq,
		Checkpoint: e.Checkpoint, Records: e.Records, Code: e.Code}
}

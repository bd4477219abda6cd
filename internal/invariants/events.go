package invariants

import (
	"fmt"
	"sort"
	"time"

	"github.com/handoffhq/handoff/client"
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

// Pause is one hand-off as the workers saw it: the previous owner's
// worker stopping a task to release it, and the next owner's start of it.
type Pause struct {
	Task     string
	From, To string
	Epoch    uint64 // the next owner's
	// Released is when the previous owner's worker stopped the task, its
	// last commit made, to release it (the release event's time where no
	// stop precedes it): the next owner may start it before the release
	// call returns.
	Released time.Time
	Started  time.Time
}

// Duration is the task's pause: nobody processed it meanwhile.
func (p Pause) Duration() time.Duration { return p.Started.Sub(p.Released) }

// Pauses pairs each release with the next owner's start of the same task:
// the start of the lowest epoch above the release's, earliest first. It
// returns the releases no start followed as unpaired: a hand-off whose
// pause was not recorded.
func Pauses(events []Event) (pauses []Pause, unpaired []Event) {
	starts := map[string][]Event{}
	for _, e := range events {
		if e.Type == client.EventStart {
			starts[e.Task] = append(starts[e.Task], e)
		}
	}
	for _, r := range events {
		if r.Type != client.EventRelease {
			continue
		}
		var next *Event
		for i := range starts[r.Task] {
			s := &starts[r.Task][i]
			if s.Epoch <= r.Epoch {
				continue
			}
			if next == nil || s.Epoch < next.Epoch || (s.Epoch == next.Epoch && s.Time.Before(next.Time)) {
				next = s
			}
		}
		if next == nil {
			unpaired = append(unpaired, r)
			continue
		}
		pauses = append(pauses, Pause{Task: r.Task, From: r.Member, To: next.Member, Epoch: next.Epoch, Released: StoppedAt(events, r), Started: next.Time})
	}
	return pauses, unpaired
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

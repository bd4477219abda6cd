package cluster

import (
	"encoding/json"
	"maps"
	"sync"
	"time"

	"github.com/handoffhq/handoff/internal/proc"
)

// The messages of agent log lines that the harnesses read. docs/bench.md
// lists those of a hand-off's breakdown with the process that logs each.
const (
	LogAgentStarted      = "agent started"      // an agent serves its API (api: its address)
	LogTaskActive        = "task active"        // the new owner; fenced: the epoch marker is appended and applied; the line: the worker's view is bumped
	LogTaskReleased      = "task released"      // the old owner; received: the release request arrived; appended: its release entry was appended (a direct hand-off)
	LogTaskTakenOver     = "task taken over"    // the new owner of a direct hand-off; received: its tailer received the release entry; seen: it had applied what precedes it and took over; the line: the worker's view is bumped
	LogReleaseSeen       = "release seen"       // the leader; seen: the member record brought the release
	LogPlan              = "plan"               // the leader: a move of the generation it has published
	LogGenerationApplied = "generation applied" // a member; seen: the generation record arrived; read: how long reading its assignment took
)

// AgentLine is one line of an agent's JSON log, with the fields any
// harness reads; a field the line does not have is zero (the activation
// steps and the read: nil).
type AgentLine struct {
	// Index is the line's position among the log's JSON lines, from 1,
	// across the agent's restarts: a mark for the Lines a caller has seen.
	Index int `json:"-"`

	Time       time.Time `json:"time"`
	Level      string    `json:"level"`
	Message    string    `json:"message"`
	Error      string    `json:"error"`
	API        string    `json:"api"`
	Task       string    `json:"task"`
	To         string    `json:"to"`   // a plan's new owner
	Kind       string    `json:"kind"` // a plan's kind of move
	Why        string    `json:"why"`  // why a release went through the leader
	Epoch      uint64    `json:"epoch"`
	Generation uint64    `json:"generation"`
	Seq        uint64    `json:"seq"`
	Replayed   uint64    `json:"replayed"`
	Planned    bool      `json:"planned"`
	Direct     bool      `json:"direct"`
	// When a step happened, where the line says: the agent logs a step
	// once its work is done.
	Received time.Time `json:"received"`
	Seen     time.Time `json:"seen"`
	Fenced   time.Time `json:"fenced"`
	Appended time.Time `json:"appended"`
	// A "task active" line's activation steps, in ms.
	WaitTailer *float64 `json:"waitTailer"`
	StopTailer *float64 `json:"stopTailer"`
	CatchUp    *float64 `json:"catchUp"`
	Append     *float64 `json:"append"`
	Apply      *float64 `json:"apply"`
	// A "generation applied" line's read of the member's assignment, in ms.
	Read *float64 `json:"read"`
}

// Activation is an agent's "task active" log line: the member became the
// task's active owner. Planned says it followed a release (a planned move);
// Replayed is how many changelog messages the activation itself had to
// apply first, while the task could not be served.
type Activation struct {
	Member   string
	Index    int // position among the member's log lines, for "after a mark"
	Task     string
	Epoch    uint64
	Seq      uint64
	Planned  bool
	Replayed uint64
}

// Takeover is an agent's "task taken over" log line: the member took the
// task over directly, from the previous owner's release entry (a stateless
// task: its message), at Epoch.
type Takeover struct {
	Member string
	Index  int // position among the member's log lines, for "after a mark"
	Task   string
	Epoch  uint64
	Seq    uint64
}

// AgentLog is an agent process's JSON log as it grows, across restarts:
// each call reads what was appended since the last one. It keeps every
// line, the API address of the last start and counts by message. Safe for
// concurrent use.
type AgentLog struct {
	member string
	r      proc.LineReader

	mu       sync.Mutex
	lines    []AgentLine
	api      string
	messages map[string]int // message → lines logged with it
	replayed uint64         // "task active" lines' replayed, summed
}

// NewAgentLog reads member's log at path (which may not exist yet).
func NewAgentLog(member, path string) *AgentLog {
	l := &AgentLog{member: member, messages: map[string]int{}}
	l.r = proc.LineReader{Path: path, Parse: l.add}
	return l
}

func (l *AgentLog) add(line []byte) error {
	var a AgentLine
	if err := json.Unmarshal(line, &a); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	a.Index = len(l.lines) + 1
	l.lines = append(l.lines, a)
	l.messages[a.Message]++
	switch a.Message {
	case LogAgentStarted:
		l.api = a.API
	case LogTaskActive:
		l.replayed += a.Replayed
	}
	return nil
}

// read takes in what was appended and returns the log under its lock;
// the caller unlocks it.
func (l *AgentLog) read() *AgentLog {
	_ = l.r.Refresh() // a log not written yet has nothing to read
	l.mu.Lock()
	return l
}

// Member is the member whose log this is.
func (l *AgentLog) Member() string { return l.member }

// Lines is how many JSON lines have been read: a mark for the ...After
// methods.
func (l *AgentLog) Lines() int {
	defer l.read().mu.Unlock()
	return len(l.lines)
}

// LinesAfter returns the lines after line mark, in the order logged.
func (l *AgentLog) LinesAfter(mark int) []AgentLine {
	defer l.read().mu.Unlock()
	return append([]AgentLine(nil), l.lines[min(max(mark, 0), len(l.lines)):]...)
}

// ActivationsAfter returns the activations logged after line mark.
func (l *AgentLog) ActivationsAfter(mark int) []Activation {
	var out []Activation
	for _, a := range l.LinesAfter(mark) {
		if a.Message == LogTaskActive {
			out = append(out, Activation{Member: l.member, Index: a.Index, Task: a.Task, Epoch: a.Epoch,
				Seq: a.Seq, Planned: a.Planned, Replayed: a.Replayed})
		}
	}
	return out
}

// TakeoversAfter returns the takeovers logged after line mark.
func (l *AgentLog) TakeoversAfter(mark int) []Takeover {
	var out []Takeover
	for _, a := range l.LinesAfter(mark) {
		if a.Message == LogTaskTakenOver {
			out = append(out, Takeover{Member: l.member, Index: a.Index, Task: a.Task, Epoch: a.Epoch, Seq: a.Seq})
		}
	}
	return out
}

// ReleasesViaLeader returns how many of the agent's releases went through
// the leader, by why.
func (l *AgentLog) ReleasesViaLeader() map[string]int {
	out := map[string]int{}
	for _, a := range l.LinesAfter(0) {
		if a.Message == LogTaskReleased && !a.Direct && a.Why != "" {
			out[a.Why]++
		}
	}
	return out
}

// Errors returns the messages of the lines logged at error level or above.
func (l *AgentLog) Errors() []string {
	var out []string
	for _, a := range l.LinesAfter(0) {
		if a.Level == "error" || a.Level == "fatal" || a.Level == "panic" {
			out = append(out, a.Message+": "+a.Error)
		}
	}
	return out
}

// API returns the worker API address the agent reported at its last start,
// or "" if it has not reported one since ForgetAPI.
func (l *AgentLog) API() string {
	defer l.read().mu.Unlock()
	return l.api
}

// ForgetAPI reads what earlier runs logged and clears their address, before
// a restart reports a new one.
func (l *AgentLog) ForgetAPI() {
	defer l.read().mu.Unlock()
	l.api = ""
}

// Count returns how many lines were logged with message msg.
func (l *AgentLog) Count(msg string) int {
	defer l.read().mu.Unlock()
	return l.messages[msg]
}

// Counts returns how many lines were logged with each message.
func (l *AgentLog) Counts() map[string]int {
	defer l.read().mu.Unlock()
	return maps.Clone(l.messages)
}

// Replayed sums the replayed counts of every "task active" line: what the
// activation-replay counter of the agent's metrics said over all its runs
// (a killed process takes its metrics with it).
func (l *AgentLog) Replayed() uint64 {
	defer l.read().mu.Unlock()
	return l.replayed
}

// Bad returns how many lines could not be parsed, and the last of them.
func (l *AgentLog) Bad() (int, string) { return l.r.Bad() }

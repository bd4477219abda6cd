package scenario

import (
	"encoding/json"
	"maps"
	"sync"
)

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

// AgentLog is an agent's JSON log as it grows, across restarts. It keeps
// the activations and takeovers, the API address of the last start and the
// lines logged at error level or above. Safe for concurrent use.
type AgentLog struct {
	member string
	r      lineReader

	mu          sync.Mutex
	lines       int
	activations []Activation
	takeovers   []Takeover
	viaLeader   map[string]int // why releases went through the leader → how many
	api         string
	errors      []string
	messages    map[string]int // message → lines logged with it
}

func newAgentLog(member, path string) *AgentLog {
	l := &AgentLog{member: member, messages: map[string]int{}, viaLeader: map[string]int{}}
	l.r = lineReader{Path: path, Parse: l.add}
	return l
}

// agentLine holds the fields of an agent log line the harness reads.
type agentLine struct {
	Level    string `json:"level"`
	Message  string `json:"message"`
	Error    string `json:"error"`
	Task     string `json:"task"`
	Epoch    uint64 `json:"epoch"`
	Seq      uint64 `json:"seq"`
	Planned  bool   `json:"planned"`
	Replayed uint64 `json:"replayed"`
	API      string `json:"api"`
	Direct   bool   `json:"direct"`
	Why      string `json:"why"`
}

func (l *AgentLog) add(line []byte) error {
	var a agentLine
	if err := json.Unmarshal(line, &a); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines++
	l.messages[a.Message]++
	switch {
	case a.Message == "task active":
		l.activations = append(l.activations, Activation{Member: l.member, Index: l.lines, Task: a.Task, Epoch: a.Epoch,
			Seq: a.Seq, Planned: a.Planned, Replayed: a.Replayed})
	case a.Message == "task released" && !a.Direct && a.Why != "":
		l.viaLeader[a.Why]++
	case a.Message == "task taken over":
		l.takeovers = append(l.takeovers, Takeover{Member: l.member, Index: l.lines, Task: a.Task, Epoch: a.Epoch, Seq: a.Seq})
	case a.Message == "agent started":
		l.api = a.API
	}
	if a.Level == "error" || a.Level == "fatal" || a.Level == "panic" {
		l.errors = append(l.errors, a.Message+": "+a.Error)
	}
	return nil
}

// refresh reads what the agent logged since the last call.
func (l *AgentLog) refresh() error { return l.r.Refresh() }

// Lines is how many JSON lines have been read: a mark for ActivationsAfter.
func (l *AgentLog) Lines() int {
	_ = l.refresh()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines
}

// ActivationsAfter returns the activations logged after line mark.
func (l *AgentLog) ActivationsAfter(mark int) []Activation {
	_ = l.refresh()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Activation
	for _, a := range l.activations {
		if a.Index > mark {
			out = append(out, a)
		}
	}
	return out
}

// TakeoversAfter returns the takeovers logged after line mark.
func (l *AgentLog) TakeoversAfter(mark int) []Takeover {
	_ = l.refresh()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Takeover
	for _, t := range l.takeovers {
		if t.Index > mark {
			out = append(out, t)
		}
	}
	return out
}

// ReleasesViaLeader returns how many of the agent's releases went through
// the leader, by why.
func (l *AgentLog) ReleasesViaLeader() map[string]int {
	_ = l.refresh()
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.viaLeader)
}

// Errors returns the messages of the lines logged at error level.
func (l *AgentLog) Errors() []string {
	_ = l.refresh()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errors...)
}

// API returns the worker API address the agent reported at its last start,
// or "" if it has not reported one since forgetAPI.
func (l *AgentLog) API() string {
	_ = l.refresh()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.api
}

// Count returns how many lines were logged with message msg.
func (l *AgentLog) Count(msg string) int {
	_ = l.refresh()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.messages[msg]
}

// forgetAPI clears the address before a restart, which reports a new one.
func (l *AgentLog) forgetAPI() {
	_ = l.refresh()
	l.mu.Lock()
	l.api = ""
	l.mu.Unlock()
}

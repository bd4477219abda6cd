package lab

import (
	"time"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/internal/cluster"
	"github.com/handoffhq/handoff/internal/record"
)

// stepMatchWindow is how far from its pause a step's line may be.
const stepMatchWindow = 30 * time.Second

// HandoffSteps are the steps of a planned hand-off, in order. A direct
// hand-off goes through the release entry's steps, one through the leader
// through the leader's; both end with the view bumped, the worker starting
// the task and its first commit.
var HandoffSteps = []string{
	StepReleaseReceived:  "release received",
	StepEntryAppended:    "release entry appended",
	StepEntryReceived:    "successor's tailer receives the release entry",
	StepEntrySeen:        "successor has applied what precedes it",
	StepLeaderSees:       "leader sees the release",
	StepGeneration:       "generation published",
	StepNewOwnerSees:     "new owner sees it",
	StepActivationFenced: "activation fenced",
	StepViewBumped:       "view version bumped",
	StepLongPollAnswered: "worker's long-poll answered",
	StepFirstCommit:      "first commit accepted",
}

// Indexes of HandoffSteps.
const (
	StepReleaseReceived = iota
	StepEntryAppended
	StepEntryReceived
	StepEntrySeen
	StepLeaderSees
	StepGeneration
	StepNewOwnerSees
	StepActivationFenced
	StepViewBumped
	StepLongPollAnswered
	StepFirstCommit
)

// AssignmentReadStep is the new owner's read of its assignment at the
// revision the generation names, before its activation starts (the
// "generation applied" line's read).
const AssignmentReadStep = "read the assignment at the generation's revision"

// ActivationSteps split the new owner's activation ("new owner sees it" to
// "activation fenced" holds them, and the assignment's application before
// them), as its "task active" line tells.
var ActivationSteps = []string{
	"wait for the tailer to apply the last commit",
	"stop the tailer",
	"catch up (the copy was behind)",
	"append the epoch marker",
	"apply the epoch marker",
}

// Handoff is one planned move as the processes' logs show it: when each of
// HandoffSteps happened (zero where no line shows it), next to the old
// owner's worker's stop of the task (the start of the pause).
type Handoff struct {
	Task     string `json:"task"`
	Stateful bool   `json:"stateful"`
	From     string `json:"from"`
	To       string `json:"to"`
	Epoch    uint64 `json:"epoch"` // the new owner's
	// Direct says the old owner handed the task over directly (its
	// release line says so): the leader's steps are not on its path.
	Direct  bool        `json:"direct"`
	Release time.Time   `json:"release"`
	Steps   []time.Time `json:"steps"`
	// Activation is how long each of ActivationSteps took; nil where
	// the line does not say.
	Activation []time.Duration `json:"activation,omitempty"`
	// AssignmentRead is how long the new owner took to read its
	// assignment after it saw the generation, the first part of "new
	// owner sees it" to "activation fenced"; nil where the line does not
	// say.
	AssignmentRead *time.Duration `json:"assignmentRead,omitempty"`
}

// Since returns how long after the worker's release step i happened, and
// whether the logs show it.
func (h Handoff) Since(i int) (time.Duration, bool) {
	if h.Steps[i].IsZero() {
		return 0, false
	}
	return h.Steps[i].Sub(h.Release), true
}

// Handoffs returns the breakdown of every finished planned move among
// pauses, from the agents' logs and the workers' events. It needs a lab of
// processes (each agent its own log); an in-process lab returns nil.
func (l *Lab) Handoffs(pauses []record.Pause) []Handoff {
	agents := l.AgentEvents()
	if len(agents) == 0 {
		return nil
	}
	workers := l.rec.WorkerEvents()
	var out []Handoff
	for _, p := range pauses {
		if p.Kind != record.PausePlanned || p.Unfinished || p.To == "" || p.To == p.From {
			continue
		}
		h := Handoff{Task: p.Task, Stateful: p.Stateful, From: p.From, To: p.To, Release: p.Start,
			Steps: make([]time.Time, len(HandoffSteps))}
		var oldEpoch uint64
		for _, e := range workers {
			switch {
			case e.Member == p.From && e.Task == p.Task && e.Type == client.EventRelease && e.Time.Equal(p.Released):
				oldEpoch = e.Epoch
			case e.Member == p.To && e.Task == p.Task && e.Type == client.EventStart && e.Time.Equal(p.End):
				h.Epoch = e.Epoch
				h.Steps[StepLongPollAnswered] = e.Time
			case h.Epoch > 0 && h.Steps[StepFirstCommit].IsZero() && e.Member == p.To && e.Task == p.Task &&
				e.Type == client.EventCommit && e.Epoch == h.Epoch:
				h.Steps[StepFirstCommit] = e.Time
			}
		}
		from, until := p.Start.Add(-stepMatchWindow), p.End.Add(stepMatchWindow)
		within := func(e AgentEvent) bool { return !e.At.Before(from) && !e.At.After(until) }
		for _, e := range agents {
			if within(e) && e.Message == cluster.LogTaskReleased && e.Member == p.From && e.Task == p.Task && e.Epoch == oldEpoch && !e.Stamp.After(p.Released) {
				// The last one before the worker heard back.
				h.Steps[StepReleaseReceived], h.Steps[StepEntryAppended], h.Direct = e.Stamp, e.Appended, e.Direct
			}
		}
		var gen uint64
		for _, e := range agents {
			if !within(e) {
				continue
			}
			switch {
			case h.Direct && h.Steps[StepEntrySeen].IsZero() && e.Message == cluster.LogTaskTakenOver && e.Member == p.To && e.Task == p.Task && e.Epoch == h.Epoch:
				h.Steps[StepEntryReceived], h.Steps[StepEntrySeen], h.Steps[StepViewBumped] = e.Received, e.Stamp, e.At
			case h.Direct:
				// The leader records a direct hand-off afterwards: its
				// steps are not on the pause's path.
			case h.Steps[StepLeaderSees].IsZero() && e.Message == cluster.LogReleaseSeen && e.Task == p.Task && e.Epoch == oldEpoch && !e.Stamp.Before(h.Steps[StepReleaseReceived]):
				h.Steps[StepLeaderSees] = e.Stamp
			case h.Steps[StepGeneration].IsZero() && e.Message == cluster.LogPlan && e.Task == p.Task && e.To == p.To &&
				(e.Kind == string(assign.MovePromote) || e.Kind == string(assign.MoveAssign)) && !e.At.Before(p.Start.Add(-time.Second)):
				h.Steps[StepGeneration], gen = e.At, e.Generation
			case h.Steps[StepActivationFenced].IsZero() && e.Message == cluster.LogTaskActive && e.Member == p.To && e.Task == p.Task && e.Epoch == h.Epoch:
				h.Steps[StepActivationFenced], h.Steps[StepViewBumped], h.Activation = e.Stamp, e.At, e.Activation
			}
		}
		for _, e := range agents {
			if h.Steps[StepNewOwnerSees].IsZero() && gen > 0 && within(e) && e.Member == p.To && e.Message == cluster.LogGenerationApplied && e.Generation >= gen {
				h.Steps[StepNewOwnerSees], h.AssignmentRead = e.Stamp, e.Read
			}
		}
		out = append(out, h)
	}
	return out
}

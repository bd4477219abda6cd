package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/handoffhq/handoff/internal/proc"
)

// scenarioScale measures the group's control plane at scale: many real
// agents in this process, each with its own NATS connections and an
// in-memory store, and a light worker per member (scale_group.go).
const scenarioScale = "scale"

// ScaleSettings are the scale scenario's flags.
type ScaleSettings struct {
	Members    []int         `json:"members"`
	NATSNodes  int           `json:"natsNodes"`
	Idle       time.Duration `json:"-"`
	Settle     time.Duration `json:"-"`
	Batch      int           `json:"startBatch"`
	CommitPace time.Duration `json:"-"`
	Profile    string        `json:"-"`
	Events     []string      `json:"events"`
	members    string
	events     string
}

// The scale scenario's events, in the order it runs them.
const (
	eventJoinOne     = "join-1"
	eventJoinTenth   = "join-10%"
	eventLeaveOne    = "leave-1"
	eventLeaveTenth  = "leave-10%"
	eventKillOne     = "kill-1"
	eventKillLeader  = "kill-leader"
	defaultScaleRuns = eventJoinOne + "," + eventJoinTenth + "," + eventLeaveOne + "," + eventLeaveTenth + "," + eventKillOne + "," + eventKillLeader
)

func scaleFlags(fs *flag.FlagSet, s *ScaleSettings) {
	fs.StringVar(&s.members, "members", "20,50,100", "scale scenario: comma-separated group `sizes` to measure, one after the other, each with --tasks tasks")
	fs.IntVar(&s.NATSNodes, "nats-nodes", 1, "scale scenario: nats-server processes to start (1, or 3 for a cluster with R3 streams); ignored with --nats")
	fs.DurationVar(&s.Idle, "idle", 20*time.Second, "scale scenario: how long the idle group is measured")
	fs.DurationVar(&s.Settle, "settle", 20*time.Second, "scale scenario: how long a balanced group rests before its idle is measured")
	fs.IntVar(&s.Batch, "start-batch", 25, "scale scenario: members started at once while the group forms")
	fs.DurationVar(&s.CommitPace, "commit-every", 0, "scale scenario: how often each worker commits to each of its active tasks besides its first commit after a move (0: only then)")
	fs.StringVar(&s.Profile, "profile", "", "scale scenario: write a CPU profile of each size's idle window into `DIR` (idle-<members>.pprof)")
	fs.StringVar(&s.events, "events", defaultScaleRuns, "scale scenario: comma-separated events to run after the idle window: "+defaultScaleRuns)
}

// parseScale checks the scale scenario's flags.
func parseScale(s *ScaleSettings) error {
	for _, f := range strings.Split(s.members, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			return fmt.Errorf("--members %q: use group sizes of 2 or more separated by commas, like 100,300,1000", s.members)
		}
		s.Members = append(s.Members, n)
	}
	for _, f := range strings.Split(s.events, ",") {
		switch e := strings.TrimSpace(f); e {
		case eventJoinOne, eventJoinTenth, eventLeaveOne, eventLeaveTenth, eventKillOne, eventKillLeader:
			s.Events = append(s.Events, e)
		case "":
		default:
			return fmt.Errorf("--events: unknown event %q; use %s", e, defaultScaleRuns)
		}
	}
	switch {
	case s.NATSNodes != 1 && s.NATSNodes != 3:
		return fmt.Errorf("--nats-nodes %d: use 1 or 3", s.NATSNodes)
	case s.Idle <= 0 || s.Settle < 0 || s.Batch < 1 || s.CommitPace < 0:
		return errors.New("--idle and --start-batch must be positive, --settle and --commit-every 0 or more")
	}
	return nil
}

// scaleResults is what the scale scenario measured.
type scaleResults struct {
	Settings Settings    `json:"settings"`
	Started  time.Time   `json:"started"`
	Sizes    []scaleSize `json:"sizes"`
	Error    string      `json:"error,omitempty"`
}

// scaleSize is one group size's figures.
type scaleSize struct {
	Members          int        `json:"members"`
	Tasks            int        `json:"tasks"`
	SessionTimeoutMS float64    `json:"sessionTimeoutMs"`
	Load             [2]float64 `json:"loadAverage"` // 1-minute load average before and after
	// FormedMS is how long the group took from the first member's start
	// to balanced.
	FormedMS float64 `json:"formedMs"`
	// IdleCPUPerMemberPct and IdleMsgsPerMemberPerSec are the headline
	// idle figures: this process's CPU over the idle window per member,
	// in % of a core, and the NATS messages (sent and received, on all of
	// its connections) of the median member per second.
	IdleCPUPerMemberPct     float64   `json:"idleCpuPerMemberPct"`
	IdleMsgsPerMemberPerSec float64   `json:"idleMsgsPerMemberPerSec"`
	Idle                    scaleIdle `json:"idle"`
	// GenerationPublishMS and PlanMS are the leader's, over every
	// generation of the size's events; FailoverMS is the time from a
	// member's kill until each of its tasks is active on another member's
	// worker (kill-1 and kill-leader).
	GenerationPublishMS PauseStats `json:"generationPublishMs"`
	PlanMS              PauseStats `json:"planMs"`
	FailoverMS          PauseStats `json:"failoverMs"`
	// LeaderFailoverMS is the time from the leader's kill until a new
	// leader published a generation.
	LeaderFailoverMS float64 `json:"leaderFailoverMs,omitempty"`
	// GenerationBytes is the size of the last generation record and of
	// the median member's assignment record.
	GenerationBytes int `json:"generationRecordBytes"`
	// HeapPerMemberBytes is this process's live heap after the idle
	// window, per member (agents, stores and connections together).
	HeapPerMemberBytes float64      `json:"heapPerMemberBytes"`
	Events             []scaleEvent `json:"events"`
	Warnings           int          `json:"warnings"` // warn and error lines the agents logged
	FirstWarning       string       `json:"firstWarning,omitempty"`
	Error              string       `json:"error,omitempty"`
}

// scaleIdle is the idle group's cost.
type scaleIdle struct {
	Seconds float64 `json:"seconds"`
	// CPUPerMemberPct is this process's CPU per member (the agents, their
	// stores and workers; nothing else runs), ServerCPUPct the NATS
	// servers', both in % of a core.
	CPUPerMemberPct float64 `json:"cpuPerMemberPct"`
	ServerCPUPct    float64 `json:"serverCpuPct"`
	// Member is the median member's traffic (all its connections, as the
	// server counts them), Leader the leader's.
	Member traffic `json:"member"`
	Leader traffic `json:"leader"`
	// MemberMax is the busiest non-leader member's.
	MemberMax   traffic `json:"memberMax"`
	Connections int     `json:"connections"`
	// Consumers on the group's KV stream and changelog stream.
	KVConsumers  int `json:"kvConsumers"`
	LogConsumers int `json:"changelogConsumers"`
}

// traffic is a connection's (or a member's connections') NATS messages and
// bytes per second, as the member sends and receives them.
type traffic struct {
	MsgsOut  float64 `json:"msgsOutPerSec"`
	MsgsIn   float64 `json:"msgsInPerSec"`
	BytesOut float64 `json:"bytesOutPerSec"`
	BytesIn  float64 `json:"bytesInPerSec"`
}

func (t traffic) msgs() float64 { return t.MsgsOut + t.MsgsIn }

// scaleEvent is one event's figures.
type scaleEvent struct {
	Name             string  `json:"name"`
	Count            int     `json:"count"` // members that joined, left or were killed
	Balanced         bool    `json:"balanced"`
	TimeToBalancedMS float64 `json:"timeToBalancedMs"`
	Generations      uint64  `json:"generations"`
	// Moves are the tasks that became active on another member.
	Moves int `json:"moves"`
	// PauseMS is, per planned move, the old owner's worker's release until
	// the new owner's worker sees the task active; FirstCommitMS until the
	// new owner's first commit is acknowledged.
	PauseMS       PauseStats `json:"pauseMs"`
	FirstCommitMS PauseStats `json:"firstCommitMs"`
	// FailoverMS is, per task of a killed member, the kill until another
	// member's worker sees it active.
	FailoverMS PauseStats `json:"failoverMs"`
	// LeaderMS is, for kill-leader, the kill until a new leader published.
	LeaderMS  float64    `json:"leaderMs,omitempty"`
	PublishMS PauseStats `json:"publishMs"`
	PlanMS    PauseStats `json:"planMs"`
	// Writes is the KV writes of the event's generations (assignments and
	// generation records).
	Writes int `json:"writes"`
	// BytesInPerGeneration is what the members not named by the event
	// received on their agent connection per generation of the event,
	// beyond their idle traffic over its time: the median member's and the
	// most any received.
	BytesInPerGeneration    float64 `json:"bytesInPerGeneration"`
	BytesInPerGenerationMax float64 `json:"bytesInPerGenerationMax"`
	MsgsInPerGeneration     float64 `json:"msgsInPerGeneration"`
	Error                   string  `json:"error,omitempty"`
}

// runScale runs the scale scenario at every size of --members.
func runScale(ctx context.Context, s Settings, e Env) error {
	res := scaleResults{Settings: s, Started: time.Now().UTC()}
	var bin string
	if s.NATS == "" {
		b, err := natsServerBinary(s)
		if err != nil {
			return err
		}
		bin = b
	}
	var err error
	for _, n := range s.Scale.Members {
		fmt.Fprintf(e.Stderr, "bench: scale: %d members, %d tasks\n", n, s.Tasks)
		size := measureScale(ctx, s, bin, n, e.Stderr)
		res.Sizes = append(res.Sizes, size)
		if size.Error != "" && err == nil {
			err = fmt.Errorf("%d members: %s", n, size.Error)
		}
		if ctx.Err() != nil {
			err = errors.New("interrupted")
			break
		}
	}
	if err != nil {
		res.Error = err.Error()
	}
	if s.Out != "" && len(res.Sizes) > 1 {
		if werr := writeFile(filepath.Join(s.Out, "scale.svg"), func(w io.Writer) error { return writeScaleSVG(w, res) }); werr != nil {
			return werr
		}
	}
	return report(s, e, res, func(w io.Writer) error { return writeScaleTable(w, res) }, err)
}

// natsServerBinary is the nats-server to start: --bin's, or one built
// from this module.
func natsServerBinary(s Settings) (string, error) {
	if s.Bin != "" {
		return filepath.Join(s.Bin, "nats-server"), nil
	}
	b, err := proc.Build()
	if err != nil {
		return "", fmt.Errorf("build nats-server: %w (or give --bin or --nats)", err)
	}
	return b.NATSServer, nil
}

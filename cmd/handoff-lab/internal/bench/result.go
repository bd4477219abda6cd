package bench

import (
	"slices"
	"time"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/internal/lab"
	"github.com/handoffhq/handoff/internal/record"
)

// modeRun is one mode's run of the scenario.
type modeRun struct {
	Mode        string `json:"mode"`
	Available   bool   `json:"available"`
	Unavailable string `json:"unavailable,omitempty"`
	Error       string `json:"error,omitempty"`
	Group       string `json:"group,omitempty"`

	History lab.HistoryStats `json:"history"`
	// Ceiling is a raw replay of one task's changelog (no decode, no
	// apply); Restore a full restore of it into a scratch store.
	Ceiling rateJSON `json:"replayCeiling"`
	Restore rateJSON `json:"referenceRestore"`

	Balanced bool `json:"balanced"`
	// NewcomerTasks is, after a scale-up, the most stateful tasks one new
	// member owns once balanced: the restores it had to run.
	NewcomerTasks    int     `json:"newcomerTasks,omitempty"`
	TimeToBalancedMS float64 `json:"timeToBalancedMs"`
	Generations      uint64  `json:"generations"`
	Pauses           struct {
		PlannedStateful  PauseStats `json:"plannedStateful"`
		PlannedStateless PauseStats `json:"plannedStateless"`
		Failover         PauseStats `json:"failover"`
		All              PauseStats `json:"all"`
	} `json:"pauses"`
	// Spikes are what the planned stateful moves cost their tasks'
	// events (record.Spikes): PlannedStateful the excess of the worst
	// latency around each measured move over its task's steady p50,
	// Steady those steady p50 latencies themselves.
	Spikes struct {
		PlannedStateful PauseStats `json:"plannedStateful"`
		Steady          PauseStats `json:"steadyLatency"`
	} `json:"spikes"`
	TaskSecondsUnavailable float64      `json:"taskSecondsUnavailable"`
	LearnerSeconds         float64      `json:"learnerSeconds"`
	RestoringSeconds       float64      `json:"restoringSeconds"`
	ReplayedByLearners     ReplayTotals `json:"replayedByLearners"`
	ReplayedByActivations  ReplayTotals `json:"replayedByActivations"`
	// ActivationReplayedMetric is handoff_activation_replayed_messages_total
	// summed over the members, counted from the event on.
	ActivationReplayedMetric float64 `json:"activationReplayedMessagesMetric"`
	// LearnerRestoreRate is the median learner's replay rate until it
	// caught up, records per second.
	LearnerRestoreRate float64        `json:"learnerRestoreRecordsPerSec"`
	Load               [2]float64     `json:"loadAverage"` // 1-minute load average before and after the run
	Throughput         throughputJSON `json:"throughput"`

	Exact    bool        `json:"exact"`
	Check    string      `json:"check"`
	Timeline string      `json:"timeline,omitempty"`
	PauseLog []pauseJSON `json:"pauseLog,omitempty"`
	// Breakdown splits the planned stateful moves into their steps (a
	// bench of processes only).
	Breakdown *breakdownJSON `json:"breakdown,omitempty"`
}

// rateJSON is a lab.Rate with its rates spelled out.
type rateJSON struct {
	Task         string  `json:"task"`
	Messages     uint64  `json:"messages"`
	Records      uint64  `json:"records,omitempty"`
	Bytes        uint64  `json:"bytes"`
	TookMS       float64 `json:"tookMs"`
	MessagesPerS float64 `json:"messagesPerSec"`
	RecordsPerS  float64 `json:"recordsPerSec,omitempty"`
	BytesPerS    float64 `json:"bytesPerSec"`
}

func toRateJSON(r lab.Rate) rateJSON {
	return rateJSON{Task: r.Task, Messages: r.Messages, Records: r.Records, Bytes: r.Bytes, TookMS: durMS(r.Took),
		MessagesPerS: r.MessagesPerSecond(), RecordsPerS: r.RecordsPerSecond(), BytesPerS: r.BytesPerSecond()}
}

// PauseStats summarizes pauses, in milliseconds.
type PauseStats struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50Ms"`
	P99   float64 `json:"p99Ms"`
	Max   float64 `json:"maxMs"`
	Sum   float64 `json:"sumMs"`
}

// ReplayTotals sums restore runs.
type ReplayTotals struct {
	Runs     int    `json:"runs"`
	Messages uint64 `json:"messages"`
	Records  uint64 `json:"records"`
	Bytes    uint64 `json:"bytes"`
}

// throughputJSON is the input committed per second before and during the
// rebalance.
type throughputJSON struct {
	Before     float64 `json:"beforePerSec"`
	During     float64 `json:"duringPerSec"`
	Worst      float64 `json:"worstWindowPerSec"`
	DipPercent float64 `json:"dipPercent"`
}

// pauseJSON is one pause.
type pauseJSON struct {
	Task     string  `json:"task"`
	Stateful bool    `json:"stateful"`
	Kind     string  `json:"kind"`
	From     string  `json:"from"`
	To       string  `json:"to"`
	AtMS     float64 `json:"atMs"` // since the event
	PauseMS  float64 `json:"pauseMs"`
	Finished bool    `json:"finished"`
	// SpikeMS is the move's excess event latency, where it was measured.
	SpikeMS *float64 `json:"spikeMs,omitempty"`
}

// timeline is what the picture of a run needs from its recorder.
type timeline struct {
	From, To, Event, Balanced time.Time
	Tasks                     []assign.Task
	Members                   []string
	Spans                     []lab.Span
	Marks                     []lab.Mark
	Pauses                    []record.Pause
	Bucket                    time.Duration
	Committed                 []float64 // input messages committed per second, per bucket from From
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	slices.Sort(s)
	return s[len(s)/2]
}

func durMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fillPauses fills run's pause and spike figures.
func fillPauses(run *modeRun, pauses []record.Pause, spikes []record.Spike, event time.Time) {
	byPause := map[pauseKey]record.Spike{}
	var excess, steady []time.Duration
	for _, sp := range spikes {
		p := sp.Pause
		if p.Kind == record.PausePlanned && p.Stateful && !p.Start.Before(event) {
			byPause[pauseKey{p.Task, p.Start.UnixNano()}] = sp
			excess = append(excess, sp.Excess)
			steady = append(steady, sp.Steady)
		}
	}
	run.Spikes.PlannedStateful, run.Spikes.Steady = PauseStatsOf(excess), PauseStatsOf(steady)
	var stateful, stateless, failover, all []time.Duration
	for _, p := range pauses {
		all = append(all, p.Duration)
		switch {
		case p.Kind == record.PauseFailover:
			failover = append(failover, p.Duration)
		case p.Stateful:
			stateful = append(stateful, p.Duration)
		default:
			stateless = append(stateless, p.Duration)
		}
		pj := pauseJSON{Task: p.Task, Stateful: p.Stateful, Kind: p.Kind, From: p.From, To: p.To,
			AtMS: durMS(p.Start.Sub(event)), PauseMS: durMS(p.Duration), Finished: !p.Unfinished}
		if sp, ok := byPause[pauseKey{p.Task, p.Start.UnixNano()}]; ok {
			ms := durMS(sp.Excess)
			pj.SpikeMS = &ms
		}
		run.PauseLog = append(run.PauseLog, pj)
	}
	run.Pauses.PlannedStateful = PauseStatsOf(stateful)
	run.Pauses.PlannedStateless = PauseStatsOf(stateless)
	run.Pauses.Failover = PauseStatsOf(failover)
	run.Pauses.All = PauseStatsOf(all)
	run.TaskSecondsUnavailable = run.Pauses.All.Sum / 1000
}

// pauseKey names a pause: its task and when it began.
type pauseKey struct {
	task  string
	start int64
}

// PauseStatsOf summarizes durations; percentiles are nearest-rank.
func PauseStatsOf(ds []time.Duration) PauseStats {
	st := PauseStats{Count: len(ds)}
	if len(ds) == 0 {
		return st
	}
	sorted := append([]time.Duration(nil), ds...)
	slices.Sort(sorted)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(sorted))+0.999999) - 1
		return sorted[min(max(i, 0), len(sorted)-1)]
	}
	st.P50, st.P99, st.Max = durMS(rank(0.50)), durMS(rank(0.99)), durMS(sorted[len(sorted)-1])
	for _, d := range ds {
		st.Sum += durMS(d)
	}
	return st
}

package scenario

import "time"

// Options size a scenario. Zero values take the defaults of
// DefaultOptions.
type Options struct {
	Group     string
	Stateful  string // task spec of the stateful tasks, e.g. "t-0..9"
	Stateless string // task spec of the stateless tasks; they get no input
	Handover  string // eager or stable
	// AcceptableLag, MaxLearnersPerMember and the durations are the group
	// config the agents are started with.
	AcceptableLag        uint64
	MaxLearnersPerMember int
	SessionTimeout       time.Duration
	ReleaseTimeout       time.Duration
	LeaveTimeout         time.Duration
	StableMaxWait        time.Duration
	// NATSNodes is 1, or 3 for a cluster; Replicas is the JetStream
	// replication of the changelog, the KV bucket and the input stream.
	NATSNodes int
	Replicas  int
	// Rate is input messages per second over all stateful tasks; Keys is
	// each task's key space.
	Rate int
	Keys int
	// Batch and MaxDelay are the counter workers' commit batching.
	Batch    int
	MaxDelay time.Duration
	// WorkerTimeout is the agents' --worker-timeout and PollWait the
	// workers' --poll-wait; zero leaves each program's default.
	WorkerTimeout time.Duration
	PollWait      time.Duration
	// Standbys is the group's --standbys (0: none).
	Standbys int
}

// DefaultOptions is a group of 10 stateful and 2 stateless tasks with a 3s
// session timeout, sized for a loaded 2-core CI box.
func DefaultOptions() Options {
	return Options{
		Group:                "scn",
		Stateful:             "t-0..9",
		Stateless:            "s-0..1",
		Handover:             "eager",
		AcceptableLag:        50,
		MaxLearnersPerMember: 4,
		SessionTimeout:       3 * time.Second,
		ReleaseTimeout:       10 * time.Second,
		LeaveTimeout:         60 * time.Second,
		StableMaxWait:        30 * time.Second,
		NATSNodes:            1,
		Replicas:             1,
		Rate:                 400,
		Keys:                 20,
		Batch:                100,
		MaxDelay:             50 * time.Millisecond,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Group == "" {
		o.Group = d.Group
	}
	if o.Stateful == "" {
		o.Stateful = d.Stateful
	}
	if o.Handover == "" {
		o.Handover = d.Handover
	}
	if o.AcceptableLag == 0 {
		o.AcceptableLag = d.AcceptableLag
	}
	if o.MaxLearnersPerMember == 0 {
		o.MaxLearnersPerMember = d.MaxLearnersPerMember
	}
	for _, p := range []struct{ v, d *time.Duration }{
		{&o.SessionTimeout, &d.SessionTimeout}, {&o.ReleaseTimeout, &d.ReleaseTimeout},
		{&o.LeaveTimeout, &d.LeaveTimeout}, {&o.StableMaxWait, &d.StableMaxWait}, {&o.MaxDelay, &d.MaxDelay},
	} {
		if *p.v == 0 {
			*p.v = *p.d
		}
	}
	if o.NATSNodes == 0 {
		o.NATSNodes = d.NATSNodes
	}
	if o.Replicas == 0 {
		o.Replicas = d.Replicas
	}
	if o.Rate == 0 {
		o.Rate = d.Rate
	}
	if o.Keys == 0 {
		o.Keys = d.Keys
	}
	if o.Batch == 0 {
		o.Batch = d.Batch
	}
	return o
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/internal/natsembed"
	"github.com/handoffhq/handoff/internal/sidecar"
	"github.com/handoffhq/handoff/statestore"
)

func init() {
	register("agent", "run the sidecar agent next to a worker", runAgent)
}

// runAgent wires every part of a member together, runs it until ctx ends,
// leaves the group gracefully, and closes the parts in reverse order.
func runAgent(ctx context.Context, args []string, e *env) (err error) {
	lc, err := loadConfig(args, e.getenv, e.stdout)
	if err != nil {
		return err
	}
	if lc.PrintConfig {
		return lc.printConfig(e.stdout)
	}
	cfg := lc.Config
	// Secrets are masked in everything the agent says: errors and logs.
	red := cfg.redactor()
	defer func() { err = red.Error(err) }()
	log := newLogger(e.stderr, lc.LogLevel, lc.LogFormat, red)
	log.Info().Str("group", cfg.Group).Str("member", cfg.MemberID).Str("dataDir", cfg.DataDir).Msg("agent starting")

	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	// A signal during the start ends it where it is: what the start
	// opened is closed, and the agent exits as after any signal.
	cutShort := func(err error) error {
		if ctx.Err() == nil {
			return err
		}
		log.Info().Err(err).Msg("start cut short by the signal; exiting")
		return nil
	}
	nc, stopNATS, err := dialOrEmbed(cfg, log)
	if err != nil {
		return cutShort(err)
	}
	defer stopNATS()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := sidecar.Open(ctx, nc, sidecar.Options{
		DataDir: cfg.DataDir,
		Store:   storeOptions(cfg),
		Agent: agent.Options{
			Group:        cfg.Group,
			MemberID:     cfg.MemberID,
			Addr:         cfg.Advertise,
			Zone:         cfg.Zone,
			Capacity:     cfg.Capacity,
			Config:       cfg.GroupConfig,
			ConfigFields: lc.groupConfigFields(),
			Replicas:     cfg.NATS.Replicas,
			Logger:       log,
			Registerer:   reg,
			Snapshots:    cfg.Snapshots,

			RequireWorker:    cfg.RequireWorker,
			WorkerTimeout:    cfg.WorkerTimeout,
			AcceptStateLoss:  acceptStateLoss(cfg),
			RecordCacheBytes: recordCacheBytes(cfg),
		},
		Listen: cfg.Listen,
		API: httpapi.Options{
			Token:             cfg.APIToken,
			AllowedHosts:      append(cfg.allowedHosts(), cfg.Advertise), // members and tools call it by that name
			ReadHeaderTimeout: cfg.APIReadHeaderTimeout,
			BodyReadTimeout:   cfg.APIBodyTimeout,
			MaxConns:          cfg.APIMaxConns,
			MaxRequests:       cfg.APIMaxRequests,
			MaxLongPolls:      cfg.APIMaxLongPolls,
			SocketGroup:       cfg.APISocketGroup,
			Metrics:           promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
			Registerer:        reg,
			Logger:            log.With().Str("component", "api").Logger(),
		},
		MetricsListen: cfg.MetricsListen,
		Logger:        log,
	})
	if err != nil {
		return cutShort(err)
	}
	// The member record goes first, then the local state, then NATS.
	defer closeLogged(log, "member", m.Close)
	started := log.Info().Str("api", m.Addr.String()).Str("group", cfg.Group).Str("member", cfg.MemberID)
	if m.MetricsAddr != nil {
		started = started.Str("metrics", m.MetricsAddr.String())
	}
	started.Msg("agent started")

	return m.Run(ctx, func() {
		// A signal: hand the tasks over before exiting. The API keeps
		// serving meanwhile: the worker releases its tasks through it,
		// and then learns that it may exit.
		if leave(m.Agent, cfg.GroupConfig.LeaveTimeout.D(), log) {
			waitDelivered(m.API.ShutdownDelivered(), 5*time.Second)
		}
	})
}

// leave hands this member's tasks over and waits until the leader says the
// member may go, at most leaveTimeout plus a margin for the last release.
// It reports whether the leave completed.
func leave(a *agent.Agent, leaveTimeout time.Duration, log zerolog.Logger) bool {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout+15*time.Second)
	defer cancel()
	if _, err := a.Leave(ctx); err != nil {
		log.Error().Err(err).Msg("could not start the leave")
		return false
	}
	log.Info().Dur("timeout", leaveTimeout).Msg("leaving: handing tasks over before exit (send the signal again to exit at once)")
	done := make(chan error, 1)
	go func() { done <- a.WaitDone(ctx) }()
	every := time.NewTicker(leaveLogEvery)
	defer every.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				log.Warn().Err(err).Msg("left before every task was handed over; the group fails them over")
				return false
			}
			log.Info().Msg("left the group")
			return true
		case <-every.C:
			deadline, _ := ctx.Deadline()
			log.Info().Str("waitingFor", leaveWaitingFor(a.LeaveStatus(), a.Assignment(), a.Ready())).
				Dur("givesUpIn", time.Until(deadline).Round(time.Second)).
				Msg("leaving: still waiting (send the signal again to exit at once)")
		}
	}
}

// leaveLogEvery is how often a leave in progress says what it waits for.
const leaveLogEvery = 5 * time.Second

// leaveWaitingFor says what a leave in progress waits for, given the
// leave's status, the member's view and its readiness.
func leaveWaitingFor(st api.LeaveStatus, v api.View, ready error) string {
	var parts []string
	if ready != nil {
		parts = append(parts, fmt.Sprintf("the member to reach its group again (%v): until then the leader hears nothing of the leave", ready))
	}
	if len(v.Revoke) > 0 {
		parts = append(parts, fmt.Sprintf("the worker to release %s (it polls /assignment, stops them and calls /tasks/{id}/release)", shortList(v.Revoke)))
	}
	var moving []string // not revoked yet: their learners warm up
	for _, id := range st.Remaining {
		if !slices.Contains(v.Revoke, id) {
			moving = append(moving, id)
		}
	}
	if len(moving) > 0 {
		caughtUp := 0
		for _, l := range st.Learners {
			if l.Lag == 0 {
				caughtUp++
			}
		}
		parts = append(parts, fmt.Sprintf("the group to move %s to other members (%d of %d learners caught up)",
			shortList(moving), caughtUp, len(st.Learners)))
	}
	if len(parts) == 0 {
		parts = append(parts, "the leader to say that the member may go")
	}
	return strings.Join(parts, "; ")
}

// shortList names ids, the first few of them if they are many.
func shortList(ids []string) string {
	const most = 5
	if len(ids) <= most {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:most], ", "), len(ids)-most)
}

// waitDelivered waits until the worker has been told to shut down (it polls
// the API), at most max: a worker that is gone never asks.
func waitDelivered(delivered <-chan struct{}, max time.Duration) {
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-delivered:
	case <-t.C:
	}
}

// dialOrEmbed connects to the configured NATS, or starts the embedded server
// and connects to it in process. The returned func closes both.
func dialOrEmbed(cfg Config, log zerolog.Logger) (*natsgo.Conn, func(), error) {
	if cfg.NATS.URL != "" {
		nc, err := connect(cfg.NATS, "handoff-agent-"+cfg.MemberID, log, hintEmbedded)
		if err != nil {
			return nil, nil, err
		}
		return nc, nc.Close, nil
	}
	srv, err := natsembed.Start(natsembed.Options{
		DataDir:    filepath.Join(cfg.DataDir, "nats"),
		Listen:     cfg.NATS.EmbeddedListen,
		SyncAlways: cfg.NATS.SyncAlways,
		Logger:     log.With().Str("component", "nats").Logger(),
		ServerName: "handoff-" + cfg.MemberID,
		Token:      cfg.NATS.Token,
		User:       cfg.NATS.User,
		Password:   cfg.NATS.Password,
	})
	if err != nil {
		if errors.Is(err, natsembed.ErrLocked) {
			return nil, nil, fmt.Errorf("%w (use another --data-dir per agent)", err)
		}
		return nil, nil, fmt.Errorf("%w (another agent may already run the embedded server: join it with --nats nats://%s)", err, cfg.NATS.EmbeddedListen)
	}
	join := "--nats " + srv.ClientURL()
	switch {
	case cfg.NATS.Token != "":
		join += " and the same --nats-token"
	case cfg.NATS.User != "":
		join += " and the same --nats-user and --nats-password"
	}
	log.Info().Str("url", srv.ClientURL()).Msg("embedded NATS server started; other agents join with " + join)
	nc, err := srv.InProcessConn(natsgo.Name("handoff-agent-"+cfg.MemberID), natsgo.MaxReconnects(-1), clientErrors(log))
	if err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	return nc, func() {
		nc.Close()
		srv.Shutdown()
	}, nil
}

func closeLogged(log zerolog.Logger, what string, close func() error) {
	if err := close(); err != nil {
		log.Warn().Err(err).Msgf("close %s", what)
	}
}

// recordCacheBytes is the agent's record cache bound from cfg.
func recordCacheBytes(cfg Config) int64 {
	if cfg.StoreRecordCacheMB == 0 {
		return -1 // off
	}
	return int64(cfg.StoreRecordCacheMB) << 20
}

// storeOptions are the local store's options from cfg.
func storeOptions(cfg Config) statestore.Options {
	minFree := int64(cfg.StoreMinFreeMB) << 20
	if minFree == 0 {
		minFree = -1 // no reserve
	}
	return statestore.Options{MinFree: minFree, OnCorrupt: statestore.CorruptPolicy(cfg.OnCorruptStore), CacheBytes: int64(cfg.StoreCacheMB) << 20}
}

// acceptStateLoss expands --accept-state-loss (checked when it was set).
func acceptStateLoss(cfg Config) []string {
	var ids []string
	for _, spec := range cfg.AcceptStateLoss {
		more, _ := assign.ExpandSpec(spec)
		ids = append(ids, more...)
	}
	return ids
}

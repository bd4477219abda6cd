package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/internal/redact"
)

func init() {
	register("group", "show or change a group's stored config", runGroup)
}

// clientFlags are the flags of the commands that read a group from NATS.
type clientFlags struct {
	group string
	nats  nats
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.group, "group", "default", "`name` of the group")
	c.nats.URL = "nats://127.0.0.1:4222"
	natsFlags(fs, &c.nats, "NATS server `URL`s (comma-separated) the group's agents use")
}

// open connects to NATS and opens the group's KV bucket.
func (c *clientFlags) open(ctx context.Context, name string) (jetstream.KeyValue, func(), error) {
	nc, err := connect(c.nats, name, zerolog.Nop())
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	kv, err := js.KeyValue(ctx, group.BucketName(c.group))
	if err != nil {
		nc.Close()
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil, fmt.Errorf("group %q does not exist on %s (no agent has started it)", c.group, redact.URL(c.nats.URL))
		}
		return nil, nil, fmt.Errorf("open group %q: %w", c.group, err)
	}
	return kv, nc.Close, nil
}

func runGroup(ctx context.Context, args []string, e *env) error {
	if len(args) == 0 || (args[0] != "show" && args[0] != "set") {
		fmt.Fprint(e.stdout, `Usage:
  handoff group show [--group NAME] [--nats URL] [--json]
  handoff group set  [--group NAME] [--nats URL] [--tasks ...] [--handover ...] ...

show prints the group's stored config; set changes the settings given as
flags (the same names as 'handoff agent') and leaves the others. Running
members follow the change at once: the leader re-plans with the new tasks and
rules. Session timeouts apply to members started after the change.
`)
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
			return nil
		}
		return fmt.Errorf("unknown group command %q: use show or set", args[0])
	}
	var cf clientFlags
	fs := flag.NewFlagSet("group "+args[0], flag.ContinueOnError)
	fs.SetOutput(e.stdout)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON instead of YAML-like lines")
	var scratch Config
	gfs := agentFlags(&scratch)
	if args[0] == "set" {
		gfs.VisitAll(func(f *flag.Flag) {
			if _, ok := groupFields[f.Name]; ok {
				fs.Var(f.Value, f.Name, f.Usage)
			}
		})
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	kv, closeNATS, err := cf.open(ctx, "handoff-group")
	if err != nil {
		return err
	}
	defer closeNATS()
	cfg, rev, ok, err := group.LoadConfig(ctx, kv)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("group %q has no stored config yet", cf.group)
	}
	if args[0] == "set" {
		changed := map[string]bool{}
		fs.Visit(func(f *flag.Flag) {
			if _, ok := groupFields[f.Name]; ok {
				changed[f.Name] = true
			}
		})
		if len(changed) == 0 {
			return errors.New("nothing to set: give the settings to change, e.g. --handover stable")
		}
		next := cfg
		// Copy only the given settings from the scratch config.
		sc := scratch.GroupConfig
		for name := range changed {
			switch name {
			case "tasks":
				next.Stateful = sc.Stateful
			case "stateless-tasks":
				next.Stateless = sc.Stateless
			case "handover":
				next.Handover = sc.Handover
			case "acceptable-lag":
				next.AcceptableLag = sc.AcceptableLag
			case "max-learners":
				next.MaxLearners = sc.MaxLearners
			case "max-learners-per-member":
				next.MaxLearnersPerMember = sc.MaxLearnersPerMember
			case "standbys":
				next.Standbys = sc.Standbys
			case "session-timeout":
				next.SessionTimeout = sc.SessionTimeout
			case "leave-timeout":
				next.LeaveTimeout = sc.LeaveTimeout
			case "release-timeout":
				next.ReleaseTimeout = sc.ReleaseTimeout
			case "stable-max-wait":
				next.StableMaxWait = sc.StableMaxWait
			}
		}
		diffs := cfg.Diff(next)
		if len(diffs) == 0 {
			fmt.Fprintln(e.stdout, "no change")
			return nil
		}
		if _, err := group.UpdateConfig(ctx, kv, next, rev); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "group %s updated:\n  %s\n", cf.group, strings.Join(diffs, "\n  "))
		return nil
	}
	return printGroupConfig(e.stdout, cf.group, cfg, *asJSON)
}

func printGroupConfig(w io.Writer, group string, cfg assign.Config, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(cfg)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "group %s\n", group)
	for _, k := range keys {
		fmt.Fprintf(w, "  %-21s %v\n", k+":", m[k])
	}
	return nil
}

package groupcli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
)

// Group runs 'handoff group show|set'.
func Group(ctx context.Context, args []string, e Env) error {
	if len(args) == 0 || (args[0] != "show" && args[0] != "set") {
		fmt.Fprint(e.Stdout, `Usage:
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
	fs.SetOutput(e.Stdout)
	cf.register(fs, e)
	asJSON := fs.Bool("json", false, "print JSON instead of YAML-like lines")
	var sc *assign.Config
	groupFields := map[string]bool{}
	if args[0] == "set" {
		gfs := flag.NewFlagSet("group settings", flag.ContinueOnError)
		sc = e.GroupFlags(gfs)
		gfs.VisitAll(func(f *flag.Flag) {
			groupFields[f.Name] = true
			fs.Var(f.Value, f.Name, f.Usage)
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
			if groupFields[f.Name] {
				changed[f.Name] = true
			}
		})
		if len(changed) == 0 {
			return errors.New("nothing to set: give the settings to change, e.g. --handover stable")
		}
		next := cfg
		// Copy only the given settings from the scratch config.
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
			fmt.Fprintln(e.Stdout, "no change")
			return nil
		}
		if _, err := group.UpdateConfig(ctx, kv, next, rev); err != nil {
			return err
		}
		fmt.Fprintf(e.Stdout, "group %s updated:\n  %s\n", cf.group, strings.Join(diffs, "\n  "))
		return nil
	}
	return printGroupConfig(e.Stdout, cf.group, cfg, *asJSON)
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

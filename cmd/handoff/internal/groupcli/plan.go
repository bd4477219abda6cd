package groupcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/handoffhq/handoff/agent/assign"
)

const planUsage = `Usage: handoff plan [--json] [--now TIME] [FILE|-]

Reads a group snapshot and prints the next assignment the leader would
publish, and why: each member's tasks before and after, every move with its
reason, the leaving members that may shut down, and when the plan would
change again with no news (a release, leave or stable-round timeout).
Nothing is contacted: the snapshot is all the assignor sees.

The snapshot is a JSON assign.Input read from FILE, or stdin for "-":

  {
    "config":  {...group config; fields left out take the defaults...},
    "now":     "2025-06-01T12:00:00Z",
    "members": [{"id": "worker-0", "capacity": 1, "zone": "a",
                 "leaving": false, "positions": {"orders-0": 1200},
                 "released": {"orders-3": {"epoch": 4, "seq": 981, "at": "..."}}}],
    "current": {"generation": 12, "tasks": {"orders-0": {"active": "worker-0", "epoch": 3}}},
    "lags":    {"orders-3": {"worker-3": 40}}
  }

Members absent from "members" are dead. To preview a scaling step, add a
member (or set "leaving": true on one) and run the plan; feed the printed
assignment back as "current" to step on. See docs/plan.md.

Flags:
  --json      print the assign.Result as JSON instead of a report
  --now TIME  plan at TIME (RFC 3339, or "now" for the current time)
              instead of the snapshot's "now"
`

// maxSnapshot bounds what plan reads, so a wrong file fails fast.
const maxSnapshot = 256 << 20

// Plan runs 'handoff plan'.
func Plan(ctx context.Context, args []string, e Env) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "")
	nowFlag := fs.String("now", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(e.Stdout, planUsage)
			return err
		}
		return fmt.Errorf("plan: %w; run 'handoff plan --help'", err)
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("plan: one snapshot at a time, got %d files; run 'handoff plan --help'", fs.NArg())
	}
	name := fs.Arg(0)
	in, err := readSnapshot(name, e)
	if err != nil {
		return err
	}
	if *nowFlag != "" {
		if in.Now, err = planTime(*nowFlag); err != nil {
			return err
		}
	}
	if err := in.Validate(); err != nil {
		return fmt.Errorf("%s is not a usable snapshot:\n  %s", planSource(name),
			strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	res := assign.Plan(in)
	if *asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return planReport(e.Stdout, in, res)
}

func planSource(name string) string {
	if name == "" || name == "-" {
		return "stdin"
	}
	return name
}

func planTime(s string) (time.Time, error) {
	if s == "now" {
		return time.Now().UTC().Truncate(time.Second), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf(`--now %q: use RFC 3339 such as 2025-06-01T12:00:00Z, or "now"`, s)
	}
	return t, nil
}

// readSnapshot reads and decodes the snapshot named by name ("" or "-" for
// stdin). Config fields the snapshot leaves out take the defaults.
func readSnapshot(name string, e Env) (assign.Input, error) {
	var r io.Reader
	switch name {
	case "", "-":
		if f, ok := e.Stdin.(*os.File); ok && name == "" && isatty.IsTerminal(f.Fd()) {
			return assign.Input{}, errors.New("plan: name a snapshot file, or pipe one in: handoff plan FILE, or ... | handoff plan -")
		}
		r = e.Stdin
	default:
		f, err := os.Open(name)
		if err != nil {
			return assign.Input{}, fmt.Errorf("plan: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxSnapshot+1))
	if err != nil {
		return assign.Input{}, fmt.Errorf("plan: read %s: %w", planSource(name), err)
	}
	if len(data) > maxSnapshot {
		return assign.Input{}, fmt.Errorf("plan: %s is larger than %d MiB; is it a snapshot?", planSource(name), maxSnapshot>>20)
	}
	in := assign.Input{Config: assign.DefaultConfig()}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return assign.Input{}, fmt.Errorf("%s: %s", planSource(name), planJSONError(data, err))
	}
	if dec.More() {
		return assign.Input{}, fmt.Errorf("%s: more than one JSON value; a snapshot is one object", planSource(name))
	}
	return in, nil
}

// planJSONError says where a decoding error is and what to do about it.
func planJSONError(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tp *time.ParseError
	switch {
	case errors.As(err, &tp):
		return fmt.Sprintf("time %q: write times in RFC 3339, e.g. \"2025-06-01T12:00:00Z\"", tp.Value)
	case errors.As(err, &syn):
		return fmt.Sprintf("%s: %v", planLineCol(data, syn.Offset), err)
	case errors.As(err, &typ):
		return fmt.Sprintf("%s: field %q holds a JSON %s, want %s", planLineCol(data, typ.Offset), typ.Field, typ.Value, planTypeName(typ.Type.String()))
	case strings.Contains(err.Error(), "duration"):
		return fmt.Sprintf("%v; write durations such as \"30s\" or \"5m\"", err)
	case strings.Contains(err.Error(), "unknown field"):
		return fmt.Sprintf("%v; a snapshot has config, now, members, current and lags (see handoff plan --help)", err)
	case errors.Is(err, io.EOF):
		return "empty; a snapshot is one JSON object (see handoff plan --help)"
	}
	return err.Error()
}

func planTypeName(t string) string {
	switch {
	case strings.Contains(t, "int"):
		return "a number"
	case t == "string", strings.HasSuffix(t, "Mode"):
		return "a string"
	case t == "bool":
		return "true or false"
	}
	return "a " + t
}

func planLineCol(data []byte, offset int64) string {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	before := data[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(offset) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}

// planReport prints res for a person: the generation, each member's tasks
// before and after, the moves, who may shut down and the next deadline.
func planReport(w io.Writer, in assign.Input, res assign.Result) error {
	tasks, err := in.Config.Tasks()
	if err != nil {
		return err
	}
	stateful := map[string]bool{}
	for _, t := range tasks {
		stateful[t.ID] = t.Stateful
	}
	prev, next := in.Current, res.Assignment
	if res.Changed {
		fmt.Fprintf(w, "Generation %d → %d (planned at %s)\n\n", prev.Generation, next.Generation, in.Now.Format(time.RFC3339))
	} else {
		fmt.Fprintf(w, "No change: generation %d stays (planned at %s)\n\n", prev.Generation, in.Now.Format(time.RFC3339))
	}

	before, after := planCounts(prev, stateful), planCounts(next, stateful)
	live := map[string]assign.Member{}
	ids := map[string]bool{}
	for _, m := range in.Members {
		live[m.ID] = m
		ids[m.ID] = true
	}
	for id := range before {
		ids[id] = true
	}
	for id := range after {
		ids[id] = true
	}
	shutdown := map[string]bool{}
	for _, m := range res.Shutdown {
		shutdown[m] = true
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tSTATE\tSTATEFUL\tSTATELESS\tLEARNING\tSTANDBY")
	for _, id := range planSorted(ids) {
		b, a := before[id], after[id]
		state := "member"
		m, ok := live[id]
		switch {
		case !ok:
			state = "dead"
		case shutdown[id]:
			state = "leaving, may shut down"
		case m.Leaving:
			state = "leaving"
		case b == (planCount{}):
			state = "new"
		}
		if ok && (m.Worker == assign.WorkerDetached || m.Worker == assign.WorkerLost) {
			state += ", worker " + string(m.Worker)
		}
		if m.Capacity > 1 {
			state += fmt.Sprintf(" (capacity %d)", m.Capacity)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", id, state,
			planArrow(b.stateful, a.stateful), planArrow(b.stateless, a.stateless),
			planArrow(b.learning, a.learning), planArrow(b.standby, a.standby))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if len(res.Moves) > 0 {
		fmt.Fprintf(w, "\nMoves (%d):\n", len(res.Moves))
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TASK\tKIND\tFROM\tTO\tREASON")
		reasons := map[string]bool{}
		for _, m := range res.Moves {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Task, m.Kind, dash(m.From), dash(m.To), m.Reason)
			reasons[m.Reason] = true
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "\nReasons:")
		for _, r := range planSorted(reasons) {
			fmt.Fprintf(w, "  %-20s %s\n", r, planReasons[r])
		}
	} else {
		fmt.Fprintln(w, "\nNo moves.")
	}
	planInFlight(w, in, res)
	if len(res.Shutdown) > 0 {
		fmt.Fprintf(w, "\nMay shut down (leaving, own nothing): %s\n", strings.Join(res.Shutdown, ", "))
	}
	if d := res.NextDeadline; !d.IsZero() {
		fmt.Fprintf(w, "\nNext deadline: %s (in %s); the leader plans again then even if nothing else happens.\n",
			d.Format(time.RFC3339), d.Sub(in.Now).Round(time.Second))
	} else {
		fmt.Fprintln(w, "\nNo deadline: only a member, progress or release changes this plan.")
	}
	return nil
}

// planInFlight lists the moves under way after this plan and what each is
// waiting for.
func planInFlight(w io.Writer, in assign.Input, res assign.Result) {
	a := res.Assignment
	var lines []string
	for _, id := range planSortedTasks(a) {
		t := a.Tasks[id]
		switch {
		case t.Revoke != nil:
			until := t.Revoke.Since.Add(in.Config.ReleaseTimeout.D())
			lines = append(lines, fmt.Sprintf("%s\t%s → %s\trevoking (%s): promoted on release, or at %s at the latest",
				id, t.Active, t.Revoke.Target, t.Revoke.Reason, until.Format(time.RFC3339)))
		case len(t.Learners) > 0:
			for _, l := range t.Learners {
				lag, ok := in.Lags[id][l.Member]
				state := "learning, no progress reported yet"
				if ok {
					state = fmt.Sprintf("learning, lag %d (acceptable %d)", lag, in.Config.AcceptableLag)
				}
				lines = append(lines, fmt.Sprintf("%s\t%s → %s\t%s", id, t.Active, l.Member, state))
			}
		}
		if mv := t.StandbyMove; mv != nil {
			state := "no progress reported yet"
			if lag, ok := in.Lags[id][mv.To]; ok {
				state = fmt.Sprintf("lag %d (acceptable %d)", lag, in.Config.AcceptableLag)
			}
			lines = append(lines, fmt.Sprintf("%s\t%s → %s\tstandby moving, %s: the copy on %s is dropped once the copies kept have caught up",
				id, mv.From, mv.To, state, mv.From))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "\nIn flight (%d):\n", len(lines))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, l := range lines {
		fmt.Fprintln(tw, l)
	}
	tw.Flush()
	if r := a.Round; r != nil {
		fmt.Fprintf(w, "Stable round %d (%d tasks) started %s; it waits for all its learners until %s.\n",
			r.ID, len(r.Tasks), r.Started.Format(time.RFC3339), r.Started.Add(in.Config.StableMaxWait.D()).Format(time.RFC3339))
	}
}

func planSortedTasks(a assign.Assignment) []string {
	out := make([]string, 0, len(a.Tasks))
	for id := range a.Tasks {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// planReasons explains the words of assign's Move.Reason.
var planReasons = map[string]string{
	"balance":             "moves so that each member holds its capacity-weighted share",
	"leave":               "its owner is leaving",
	"leave-timeout":       "its owner's leave timeout passed; the target may still be catching up",
	"unowned":             "nobody owned it (new group or task); given at once",
	"owner-dead":          "its owner's lease expired; given at once to the most caught-up member",
	"released":            "the old owner released it; the target resumes from its last commit",
	"release-timeout":     "the old owner did not release in time; it is fenced",
	"no-eligible-member":  "no live member that is not leaving, with its worker attached, can own it; it waits, state kept in the changelog",
	"worker-lost":         "its owner's worker is lost; its agent released it and it moved at once to the most caught-up member",
	"target-detached":     "the revoke's target has no worker attached; the owner keeps the task",
	"removed-from-config": "the task is no longer in the group's config",
	"member-dead":         "that member died",
	"member-leaving":      "that member is leaving and gets nothing new",
	"target-dead":         "the revoke's target died",
	"target-leaving":      "the revoke's target started leaving",
	"not-needed":          "the task's destination changed",
	"max-learners":        "dropped to respect the learner bounds",
	"standbys":            "a warm copy for failover, to reach the configured standbys",
	"too-many":            "more standbys than configured",
	"zones":               "a standby moves so that the task's copies span more zones",
	"stateless":           "stateless tasks have no learners or standbys",
	"is-active":           "the entry named the task's owner itself",
}

type planCount struct{ stateful, stateless, learning, standby int }

func planCounts(a assign.Assignment, stateful map[string]bool) map[string]planCount {
	out := map[string]planCount{}
	for id, t := range a.Tasks {
		if t == nil {
			continue
		}
		if t.Active != "" {
			c := out[t.Active]
			if stateful[id] {
				c.stateful++
			} else {
				c.stateless++
			}
			out[t.Active] = c
		}
		for _, l := range t.Learners {
			c := out[l.Member]
			c.learning++
			out[l.Member] = c
		}
		for _, s := range t.Standbys {
			c := out[s]
			c.standby++
			out[s] = c
		}
	}
	return out
}

func planArrow(before, after int) string {
	if before == after {
		return fmt.Sprint(after)
	}
	return fmt.Sprintf("%d → %d", before, after)
}

func planSorted(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

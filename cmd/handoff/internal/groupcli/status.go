package groupcli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/internal/redact"
)

// Status runs 'handoff status'.
func Status(ctx context.Context, args []string, e Env) error {
	var cf clientFlags
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(e.Stdout)
	cf.register(fs, e)
	watch := fs.Bool("watch", false, "redraw every second until interrupted")
	asJSON := fs.Bool("json", false, "print the group as JSON (one object per redraw with --watch)")
	fs.Usage = func() {
		fmt.Fprint(e.Stdout, "Usage: handoff status [--group NAME] [--nats URL] [--watch] [--json]\n\n"+
			"Reads the group from NATS: leader, generation, members and their states,\n"+
			"tasks per member, learners with progress and ETA, and each task's newest\n"+
			"snapshot (changelog sequence and age).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	nc, err := cf.nats.Connect("handoff-status")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, group.BucketName(cf.group))
	if err != nil {
		return fmt.Errorf("open group %q on %s: %w (has an agent of this group started?)", cf.group, redact.URL(cf.nats.URL()), err)
	}
	book := newProgressCollector()
	stop, err := group.WatchProgress(nc, cf.group, func(p group.Progress) { book.add(p.LearnerProgress) })
	if err != nil {
		return err
	}
	defer stop()
	// Learners report once a second: listen that long before the first view.
	if !group.Sleep(ctx, 1100*time.Millisecond) {
		return nil
	}
	for {
		gv, err := group.ReadGroup(ctx, kv, cf.group, book.recent(3*time.Second))
		if err != nil {
			return err
		}
		if err := group.ReadSnapshots(ctx, js, &gv, time.Now()); err != nil {
			return err
		}
		if *asJSON {
			if err := json.NewEncoder(e.Stdout).Encode(gv); err != nil {
				return err
			}
		} else {
			if *watch {
				fmt.Fprint(e.Stdout, "\033[H\033[2J")
			}
			renderGroup(e.Stdout, gv, time.Now())
		}
		if !*watch || !group.Sleep(ctx, time.Second) {
			return nil
		}
	}
}

// progressCollector keeps the latest report of each learner.
type progressCollector struct {
	mu sync.Mutex
	m  map[string]api.LearnerProgress
}

func newProgressCollector() *progressCollector {
	return &progressCollector{m: map[string]api.LearnerProgress{}}
}

func (c *progressCollector) add(p api.LearnerProgress) {
	c.mu.Lock()
	c.m[p.Task+"/"+p.Member] = p
	c.mu.Unlock()
}

func (c *progressCollector) recent(maxAge time.Duration) []api.LearnerProgress {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []api.LearnerProgress
	for k, p := range c.m {
		if time.Since(p.Updated) > maxAge {
			delete(c.m, k)
			continue
		}
		out = append(out, p)
	}
	return out
}

// renderGroup draws the group for people.
func renderGroup(w io.Writer, gv api.GroupView, now time.Time) {
	stateful := 0
	for _, t := range gv.Tasks {
		if t.Stateful {
			stateful++
		}
	}
	leader := gv.Leader
	if leader == "" {
		leader = "(none: election in progress)"
	}
	fmt.Fprintf(w, "group %s · generation %d · leader %s · %d members · %d tasks (%d stateful, %d stateless)\n\n",
		gv.Group, gv.Generation, leader, len(gv.Members), len(gv.Tasks), stateful, len(gv.Tasks)-stateful)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tSTATE\tWORKER\tACTIVE\tLEARNING\tSTANDBY\tZONE\tADDR")
	for _, m := range gv.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", m.ID, m.State, workerCell(m, now), len(m.Active), len(m.Learning), len(m.Standby), dash(m.Zone), dash(m.Addr))
	}
	tw.Flush()

	var moving []api.GroupTask
	for _, t := range gv.Tasks {
		if len(t.Learners) > 0 || t.Revoking != "" {
			moving = append(moving, t)
		}
	}
	learners := map[string]api.LearnerProgress{}
	for _, p := range gv.Progress {
		learners[p.Task+"/"+p.Member] = p
	}
	if len(moving) > 0 {
		fmt.Fprintln(w, "\nMOVES IN FLIGHT")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TASK\tFROM\tTO\tPHASE\tPROGRESS\tLAG\tRATE\tETA")
		for _, t := range moving {
			for _, l := range t.Learners {
				p, ok := learners[t.ID+"/"+l]
				phase := "learning"
				if t.Revoking == l {
					phase = "revoking"
				}
				if !ok {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t-\t-\t-\n", t.ID, dash(t.Active), l, phase, Bar(0, false))
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", t.ID, dash(t.Active), l, phase,
					Bar(ProgressFraction(p), true), p.Lag, rate(p.Rate), ETA(p))
			}
			if t.Revoking != "" && !slices.Contains(t.Learners, t.Revoking) {
				fmt.Fprintf(tw, "%s\t%s\t%s\trevoking\t%s\t-\t-\t-\n", t.ID, dash(t.Active), t.Revoking, Bar(1, true))
			}
		}
		tw.Flush()
	}

	renderSnapshots(w, gv)

	fmt.Fprintln(w, "\nTASKS BY MEMBER")
	byMember := map[string][]string{}
	for _, t := range gv.Tasks {
		owner := t.Active
		if owner == "" {
			owner = "(unassigned)"
		}
		name := t.ID
		if !t.Stateful {
			name += "*"
		}
		byMember[owner] = append(byMember[owner], name)
	}
	owners := make([]string, 0, len(byMember))
	for o := range byMember {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	for _, o := range owners {
		fmt.Fprintf(w, "  %-12s %s\n", o, strings.Join(byMember[o], " "))
	}
	fmt.Fprintf(w, "  (* stateless)   %s\n", now.Format(time.TimeOnly))
}

// renderSnapshots lists each stateful task's newest snapshot.
func renderSnapshots(w io.Writer, gv api.GroupView) {
	fmt.Fprintln(w, "\nSNAPSHOTS")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSEQ\tAGE")
	for _, t := range gv.Tasks {
		switch {
		case !t.Stateful:
		case t.SnapshotSeq == 0:
			fmt.Fprintf(tw, "%s\t-\t-\n", t.ID)
		default:
			fmt.Fprintf(tw, "%s\t%d\t%s\n", t.ID, t.SnapshotSeq, t.SnapshotAge.Round(time.Second))
		}
	}
	tw.Flush()
}

// ProgressFraction is how much of its restore a learner has done.
func ProgressFraction(p api.LearnerProgress) float64 {
	if p.Lag == 0 {
		return 1
	}
	done := float64(p.Replayed)
	return done / (done + float64(p.Lag))
}

// Bar draws fraction f of a restore as a 20-cell bar with a percentage,
// or a bar of question marks when the progress is not known.
func Bar(f float64, known bool) string {
	const width = 20
	if !known {
		return "[" + strings.Repeat("?", width) + "]"
	}
	n := int(f*width + 0.5)
	return fmt.Sprintf("[%s%s] %3.0f%%", strings.Repeat("#", n), strings.Repeat("-", width-n), f*100)
}

func rate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.1fM/s", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk/s", r/1e3)
	default:
		return fmt.Sprintf("%.0f/s", r)
	}
}

// ETA says when a learner will have caught up: "caught up", a duration,
// or "?" when its rate is not known yet.
func ETA(p api.LearnerProgress) string {
	if p.Lag == 0 {
		return "caught up"
	}
	if p.ETA <= 0 {
		return "?"
	}
	return p.ETA.Round(100 * time.Millisecond).String()
}

// workerCell shows a member's worker: attached, or detached or lost with
// how long ago its last poll ended; - when the member requires no worker.
func workerCell(m api.MemberView, now time.Time) string {
	switch {
	case m.Worker == "" || m.State == "dead":
		return "-"
	case m.WorkerSince != nil && m.Worker != api.WorkerAttached:
		return fmt.Sprintf("%s %s", m.Worker, now.Sub(*m.WorkerSince).Round(time.Second))
	}
	return m.Worker
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

package main

import (
	"context"

	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/client"
	"github.com/handoffhq/handoff/cmd/handoff/internal/groupcli"
)

func init() {
	register("leave", "make a member leave its group gracefully (POST /leave) and follow it", runLeave)
}

// runLeave is 'handoff leave': it talks to one member's agent over the
// worker API (POST /leave, then GET /leave), not to NATS, so it needs only
// the member's address and token. It follows the leave by long-polling
// /assignment, which answers as soon as the member's view changes (or
// after 2 s without a change), and re-reads the leave's status after each
// answer. It returns once the agent or the view says
// shutdown; --timeout bounds the whole command, the POST included, and an
// interrupted leave goes on in the agent.
func runLeave(ctx context.Context, args []string, e *env) error {
	fs := flag.NewFlagSet("leave", flag.ContinueOnError)
	fs.SetOutput(e.stdout)
	addr := fs.String("addr", "127.0.0.1:7070", "`address` of the member's agent API: host:port, a URL, or unix:PATH for an agent on a Unix socket")
	token := fs.String("token", e.getenv("HANDOFF_API_TOKEN"), "API token, if the agent requires one (default $HANDOFF_API_TOKEN)")
	noWait := fs.Bool("no-wait", false, "start the leave and return at once")
	timeout := fs.Duration("timeout", 0, "give up waiting after this long (0: wait until done)")
	fs.Usage = func() {
		fmt.Fprint(e.stdout, `Usage: handoff leave [--addr HOST:PORT|unix:PATH] [--no-wait] [--timeout D]

Marks the member leaving: the group warms its stateful tasks on the members
that stay and hands each over once its learner has caught up; stateless tasks
move at once. Unless --no-wait is given, it shows the leave's progress until
the agent says the member may shut down (its worker is told the same through
/assignment). Running it twice is harmless.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	base := *addr
	if _, socket := api.SocketPath(base); !socket && !strings.Contains(base, "://") {
		base = "http://" + base
	}
	c := client.New(base, client.WithToken(*token))
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	st, err := c.Leave(ctx)
	if err != nil {
		return fmt.Errorf("start leave on %s: %w", *addr, err)
	}
	printLeave(e.stdout, st)
	if *noWait || st.Shutdown {
		return nil
	}
	var after uint64
	for {
		v, err := c.Assignment(ctx, after, 2*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("leave of %s not done: %w", *addr, ctx.Err())
			}
			return fmt.Errorf("follow leave on %s: %w", *addr, err)
		}
		after = v.Version
		if st, err = c.LeaveStatus(ctx); err != nil {
			return fmt.Errorf("leave status of %s: %w", *addr, err)
		}
		printLeave(e.stdout, st)
		if st.Shutdown || v.Shutdown {
			fmt.Fprintln(e.stdout, "done: the member owns nothing and may shut down")
			return nil
		}
	}
}

// printLeave writes one line of progress, plus a line per learner. The
// remaining tasks are listed only when there are at most 8, so that the
// line stays readable for a member that owns many.
func printLeave(w io.Writer, st api.LeaveStatus) {
	fmt.Fprintf(w, "%s  %s, %d task(s) still here", time.Now().Format(time.TimeOnly), st.State, len(st.Remaining))
	if len(st.Remaining) > 0 && len(st.Remaining) <= 8 {
		fmt.Fprintf(w, ": %s", strings.Join(st.Remaining, " "))
	}
	fmt.Fprintln(w)
	for _, l := range st.Learners {
		fmt.Fprintf(w, "    %-14s -> %-10s %s lag %d  %s\n", l.Task, l.Member, groupcli.Bar(groupcli.ProgressFraction(l), true), l.Lag, groupcli.ETA(l))
	}
}

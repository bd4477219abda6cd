package demo

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/cmd/handoff-lab/internal/bench"
	"github.com/handoffhq/handoff/internal/lab"
)

// redrawEvery is how often the live view is redrawn.
const redrawEvery = 250 * time.Millisecond

// recentNotes is how many notes the terminal view keeps on screen.
const recentNotes = 8

// ANSI colours.
const (
	ansiReset   = "\033[0m"
	ansiBold    = "\033[1m"
	ansiDim     = "\033[2m"
	ansiRed     = "\033[31m"
	ansiGreen   = "\033[32m"
	ansiYellow  = "\033[33m"
	ansiBlue    = "\033[34m"
	ansiMagenta = "\033[35m"
	ansiCyan    = "\033[36m"
)

// view shows the demo: on a terminal, a screen redrawn a few times a
// second; otherwise progressive lines. Notes may come from any goroutine.
type view struct {
	w     io.Writer
	s     settings
	began time.Time

	mu      sync.Mutex
	phase   string
	detail  string
	queue   []string   // plain lines waiting to be printed
	recent  []lab.Note // the terminal view's latest notes
	printed map[string]time.Time
	drawn   bool
	rec     *lab.Recorder
	cancel  context.CancelFunc
	done    chan struct{}
}

// newView returns a view that prints to w; times on screen count from
// began. Until start, phases and lines print as they come, in both modes.
func newView(w io.Writer, s settings, began time.Time) *view {
	return &view{w: w, s: s, began: began, printed: map[string]time.Time{}}
}

// paint colours s unless colours are off.
func (v *view) paint(code, s string) string {
	if v.s.noColor {
		return s
	}
	return code + s + ansiReset
}

// stamp is t as seconds since the demo began, the time column of notes.
func (v *view) stamp(t time.Time) string {
	return fmt.Sprintf("%6.1fs", t.Sub(v.began).Seconds())
}

// note takes in something that happened. It is called with the recorder's
// lock held: it only queues.
func (v *view) note(n lab.Note) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.s.plain {
		v.queue = append(v.queue, v.paint(ansiDim, v.stamp(n.At))+"  "+n.Text)
		return
	}
	v.recent = append(v.recent, n)
	if len(v.recent) > recentNotes {
		v.recent = v.recent[len(v.recent)-recentNotes:]
	}
}

// setPhase names what the demo does now.
func (v *view) setPhase(phase, detail string) {
	v.mu.Lock()
	v.phase, v.detail = phase, detail
	if v.s.plain || v.rec == nil {
		v.queue = append(v.queue, v.paint(ansiBold, "▶ "+phase)+": "+detail)
	}
	v.mu.Unlock()
	v.flush()
}

// line prints a line of setup information.
func (v *view) line(format string, args ...any) {
	v.mu.Lock()
	v.queue = append(v.queue, "  "+fmt.Sprintf(format, args...))
	v.mu.Unlock()
	v.flush()
}

// flush prints the queued lines, unless the terminal view is running.
func (v *view) flush() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.s.plain && v.rec != nil {
		return
	}
	for _, l := range v.queue {
		fmt.Fprintln(v.w, l)
	}
	v.queue = v.queue[:0]
}

// start starts drawing rec's snapshots until stop.
func (v *view) start(ctx context.Context, rec *lab.Recorder) {
	ctx, cancel := context.WithCancel(ctx)
	v.mu.Lock()
	v.rec, v.cancel, v.done = rec, cancel, make(chan struct{})
	v.mu.Unlock()
	go func() {
		defer close(v.done)
		t := time.NewTicker(redrawEvery)
		defer t.Stop()
		for {
			v.draw()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// stop stops drawing, after a last frame. It is safe to call more than once.
func (v *view) stop() {
	v.mu.Lock()
	cancel, done := v.cancel, v.done
	v.cancel = nil
	v.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	v.draw()
	v.mu.Lock()
	v.rec = nil
	v.mu.Unlock()
	v.flush()
	if !v.s.plain {
		fmt.Fprintln(v.w)
	}
}

// draw draws one frame (terminal) or prints what is new (plain).
func (v *view) draw() {
	v.mu.Lock()
	rec := v.rec
	v.mu.Unlock()
	if rec == nil {
		return
	}
	snap := rec.Snapshot()
	if v.s.plain {
		v.drawPlain(snap)
		return
	}
	v.drawScreen(snap)
}

// drawPlain prints the queued notes and, at most once a second per
// learner, its progress.
func (v *view) drawPlain(snap lab.Snapshot) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, l := range v.queue {
		fmt.Fprintln(v.w, l)
	}
	v.queue = v.queue[:0]
	now := time.Now()
	for _, t := range snap.Tasks {
		for _, ls := range t.Learners {
			if ls.Progress == nil || ls.Progress.Lag == 0 {
				continue
			}
			key := t.ID + "/" + ls.Member
			if now.Sub(v.printed[key]) < time.Second {
				continue
			}
			v.printed[key] = now
			fmt.Fprintf(v.w, "%s    %s on %s: %s\n", v.paint(ansiDim, v.stamp(now)), t.ID, ls.Member, v.progress(*ls.Progress))
		}
	}
}

// drawScreen redraws the terminal view in place.
func (v *view) drawScreen(snap lab.Snapshot) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b strings.Builder
	line := func(format string, args ...any) {
		fmt.Fprintf(&b, format, args...)
		b.WriteString("\033[K\n")
	}
	if !v.drawn {
		b.WriteString("\033[2J")
		v.drawn = true
	}
	b.WriteString("\033[H")
	leader := snap.Leader
	if leader == "" {
		leader = "-"
	}
	line("%s · %s · generation %d · leader %s · input %d msg/s · committed %d · %s",
		v.paint(ansiBold, "handoff-lab demo"), v.s.handover, snap.Generation, leader, v.s.rate, snap.Committed,
		time.Since(v.began).Round(100*time.Millisecond))
	line("%s %s", v.paint(ansiBold+ansiCyan, "▶ "+v.phase+":"), v.detail)
	line("%s", v.summary(snap))
	line("")
	for _, m := range snap.Members {
		state := m.GroupState
		if state == "" {
			state = m.State
		}
		name := m.ID
		if m.ID == snap.Leader {
			name += "*"
		}
		active := v.paint(ansiGreen, fmt.Sprintf("%2d active", len(m.Active)))
		if len(m.Active) == 0 {
			active = v.paint(ansiDim, " 0 active")
		}
		row := fmt.Sprintf("  %-4s %-8s %s  %s", name, state, active, strings.Join(naturalSorted(m.Active), " "))
		if len(m.Learning) > 0 {
			row += v.paint(ansiYellow, "  learning "+strings.Join(naturalSorted(m.Learning), " "))
		}
		if m.State != lab.MemberRunning && m.State != lab.MemberLeaving {
			row = v.paint(ansiDim, fmt.Sprintf("  %-4s %-8s", m.ID, m.State))
		}
		line("%s", row)
	}
	line("%s", v.paint(ansiDim, "  (* leader)"))
	line("")
	moving := 0
	for _, t := range snap.Tasks {
		if s := v.taskLine(t); s != "" {
			line("  %s", s)
			moving++
		}
	}
	if moving == 0 {
		line("%s", v.paint(ansiDim, "  nothing in flight"))
	}
	line("")
	for _, n := range v.recent {
		line("  %s  %s", v.paint(ansiDim, v.stamp(n.At)), n.Text)
	}
	b.WriteString("\033[J")
	fmt.Fprint(v.w, b.String())
}

// summary says in a line what is in flight.
func (v *view) summary(snap lab.Snapshot) string {
	var learning, restoring, revoking, paused int
	for _, t := range snap.Tasks {
		for _, l := range t.Learners {
			if l.Role == lab.RoleRestoring {
				restoring++
			} else {
				learning++
			}
		}
		if t.OwnerRole == lab.RoleRevoking {
			revoking++
		}
		if t.Running == "" && !t.PausedSince.IsZero() {
			paused++
		}
	}
	if snap.Steady {
		return v.paint(ansiGreen, "steady")
	}
	var parts []string
	add := func(n int, what, code string) {
		if n > 0 {
			parts = append(parts, v.paint(code, fmt.Sprintf("%d %s", n, what)))
		}
	}
	add(learning, "learning", ansiYellow)
	add(revoking, "revoking", ansiBlue)
	add(restoring, "restoring", ansiMagenta)
	add(paused, "paused", ansiRed)
	if len(parts) == 0 {
		return "settling"
	}
	return strings.Join(parts, " · ")
}

// taskLine describes a task that is moving; "" for a task at rest.
func (v *view) taskLine(t lab.TaskSnapshot) string {
	name := fmt.Sprintf("%-10s", t.ID)
	switch {
	case t.Running == "" && !t.PausedSince.IsZero():
		move := t.PausedFrom + " → "
		if t.Owner != "" && t.Owner != t.PausedFrom {
			move += t.Owner
		} else {
			move += "?"
		}
		return name + " " + move + " " + v.paint(ansiRed, "paused "+lab.FormatPause(time.Since(t.PausedSince)))
	case t.OwnerRole == lab.RoleRevoking:
		target := ""
		for _, l := range t.Learners {
			target = " → " + l.Member
		}
		return name + " " + v.paint(ansiBlue, fmt.Sprintf("%s%s revoking: its worker commits and releases", t.Owner, target))
	}
	var parts []string
	sort.Slice(t.Learners, func(i, j int) bool { return t.Learners[i].Member < t.Learners[j].Member })
	for _, l := range t.Learners {
		from := t.Owner
		if from == "" || from == l.Member {
			from = "-"
		}
		what, code := "learning ", ansiYellow
		if l.Role == lab.RoleRestoring {
			what, code = "restoring", ansiMagenta
		}
		s := fmt.Sprintf("%s → %s %s", from, l.Member, v.paint(code, what))
		if l.Progress != nil {
			s += " " + v.progress(*l.Progress)
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return ""
	}
	return name + " " + strings.Join(parts, "; ")
}

// progress draws a learner's bar, lag, rate and ETA.
func (v *view) progress(p api.LearnerProgress) string {
	f := 1.0
	if p.Lag > 0 {
		f = float64(p.Replayed) / float64(p.Replayed+p.Lag)
	}
	const width = 16
	n := int(f*width + 0.5)
	bar := strings.Repeat("█", n) + strings.Repeat("░", width-n)
	eta := "caught up"
	switch {
	case p.Lag > 0 && p.ETA > 0:
		eta = "ETA " + p.ETA.Round(100*time.Millisecond).String()
	case p.Lag > 0:
		eta = "ETA ?"
	}
	return fmt.Sprintf("%s %3.0f%%  lag %s msgs  %s msg/s  %s", v.paint(ansiYellow, bar), 100*f, bench.Count(float64(p.Lag)), bench.Count(p.Rate), eta)
}

// naturalSorted returns ids sorted with their numeric suffixes compared as
// numbers: orders-2 before orders-10.
func naturalSorted(ids []string) []string {
	out := append([]string(nil), ids...)
	split := func(s string) (string, int) {
		i := len(s)
		for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
			i--
		}
		n, err := strconv.Atoi(s[i:])
		if err != nil {
			return s, -1
		}
		return s[:i], n
	}
	sort.SliceStable(out, func(i, j int) bool {
		pi, ni := split(out[i])
		pj, nj := split(out[j])
		if pi != pj {
			return pi < pj
		}
		return ni < nj
	})
	return out
}

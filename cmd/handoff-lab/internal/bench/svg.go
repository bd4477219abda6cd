package bench

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"time"

	"github.com/handoffhq/handoff/internal/lab"
)

// Colours of the timeline, by role.
var timelineColors = map[string]string{
	lab.RoleActive:    "#2e7d32",
	lab.RoleRevoking:  "#9ccc65",
	lab.RoleLearner:   "#f9a825",
	lab.RoleStandby:   "#1e88e5",
	lab.RoleRestoring: "#8e24aa",
}

const (
	svgWidth  = 1200
	svgLeft   = 96
	svgRight  = 24
	svgTop    = 84
	svgLaneH  = 5
	svgLaneGp = 1
	svgRowGap = 6
	svgSparkH = 64
)

// writeTimelineSVG draws a run as a self-contained SVG: one row per task,
// one thin lane per member within it, coloured by the member's role for the
// task over time; red where the task was paused (no worker ran it); the
// scenario's events and the moment of balance as vertical lines; and the
// input committed per second underneath.
func writeTimelineSVG(w io.Writer, s Settings, run modeRun, tl *timeline) error {
	bw := bufio.NewWriter(w)
	lanes := max(len(tl.Members), 1)
	rowH := lanes*(svgLaneH+svgLaneGp) + svgRowGap
	rowsH := len(tl.Tasks) * rowH
	sparkTop := svgTop + rowsH + 36
	height := sparkTop + svgSparkH + 70
	span := tl.To.Sub(tl.From).Seconds()
	if span <= 0 {
		span = 1
	}
	plotW := float64(svgWidth - svgLeft - svgRight)
	x := func(t time.Time) float64 {
		return svgLeft + math.Max(0, math.Min(plotW, t.Sub(tl.From).Seconds()/span*plotW))
	}
	laneOf := map[string]int{}
	for i, m := range tl.Members {
		laneOf[m] = i
	}
	rowOf := map[string]int{}
	for i, t := range tl.Tasks {
		rowOf[t.ID] = i
	}
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	esc := html.EscapeString

	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		svgWidth, height, svgWidth, height)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	title := fmt.Sprintf("%s · mode %s · %d stateful + %d stateless tasks · %d keys × %d B per task · %d msg/s",
		scenarioTitle(s), run.Mode, s.stateful(), s.stateless(), s.Keys, s.ValueSize, s.Rate)
	p(`<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", svgLeft, esc(title))
	p(`<text x="%d" y="38" fill="#555">time to balanced %s · %d generations · stateful pause p50 %s, p99 %s · lanes in each row: %s (top to bottom)</text>`+"\n",
		svgLeft, seconds(run.TimeToBalancedMS), run.Generations, Millis(run.Pauses.PlannedStateful.P50),
		Millis(run.Pauses.PlannedStateful.P99), esc(joinIDs(tl.Members)))

	// Time axis: ticks relative to the event.
	step := niceStep(span)
	for t := math.Ceil(-tl.Event.Sub(tl.From).Seconds()/step) * step; ; t += step {
		at := tl.Event.Add(time.Duration(t * float64(time.Second)))
		if at.After(tl.To) {
			break
		}
		xx := x(at)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eeeeee"/>`+"\n", xx, svgTop-4, xx, svgTop+rowsH)
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#777">%s</text>`+"\n", xx, svgTop+rowsH+14, tickLabel(t))
	}

	// Rows.
	for i, t := range tl.Tasks {
		y := svgTop + i*rowH
		if i%2 == 1 {
			p(`<rect x="%d" y="%d" width="%.0f" height="%d" fill="#fafafa"/>`+"\n", svgLeft, y-svgRowGap/2, plotW, rowH)
		}
		name := t.ID
		if !t.Stateful {
			name += "*"
		}
		p(`<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", svgLeft-6, y+rowH/2, esc(name))
	}
	for _, sp := range tl.Spans {
		if !sp.End.After(tl.From) || sp.Start.After(tl.To) {
			continue
		}
		row, ok := rowOf[sp.Task]
		lane, ok2 := laneOf[sp.Member]
		if !ok || !ok2 {
			continue
		}
		x0, x1 := x(sp.Start), x(sp.End)
		y := svgTop + row*rowH + lane*(svgLaneH+svgLaneGp)
		p(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s on %s: %s for %s</title></rect>`+"\n",
			x0, y, math.Max(x1-x0, 0.8), svgLaneH, timelineColors[sp.Role], esc(sp.Task), esc(sp.Member), sp.Role,
			lab.FormatPause(sp.End.Sub(sp.Start)))
	}
	for _, pa := range tl.Pauses {
		row, ok := rowOf[pa.Task]
		if !ok {
			continue
		}
		end := pa.End
		if pa.Unfinished {
			end = tl.To
		}
		x0, x1 := x(pa.Start), x(end)
		y := svgTop + row*rowH - 2
		p(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#e53935" fill-opacity="0.75"><title>%s paused %s (%s → %s, %s)</title></rect>`+"\n",
			x0, y, math.Max(x1-x0, 1.5), rowH-svgRowGap+3, esc(pa.Task), lab.FormatPause(pa.Duration), esc(pa.From), esc(dash(pa.To)), pa.Kind)
	}

	// Events and balance.
	labelY := svgTop - 10
	for i, m := range tl.Marks {
		if m.At.Before(tl.From) || m.At.After(tl.To) {
			continue
		}
		xx := x(m.At)
		text := m.Text
		if text == "" {
			text = m.Member + " " + m.Kind
		}
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#424242" stroke-dasharray="4 3"/>`+"\n", xx, svgTop-6, xx, svgTop+rowsH)
		p(`<text x="%.1f" y="%d" fill="#424242">%s</text>`+"\n", xx+3, labelY-(i%2)*11, esc(text))
	}
	if run.Balanced {
		xx := x(tl.Balanced)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#2e7d32" stroke-width="2"/>`+"\n", xx, svgTop-6, xx, svgTop+rowsH)
		p(`<text x="%.1f" y="%d" fill="#2e7d32" font-weight="bold">balanced +%s</text>`+"\n", xx+3, svgTop+rowsH+26, seconds(run.TimeToBalancedMS))
	}

	// Committed input per second.
	peak := 1.0
	for _, v := range tl.Committed {
		peak = math.Max(peak, v)
	}
	p(`<text x="%d" y="%d" text-anchor="end" fill="#555">committed</text>`+"\n", svgLeft-6, sparkTop+svgSparkH/2)
	p(`<text x="%d" y="%d" text-anchor="end" fill="#555">%s/s</text>`+"\n", svgLeft-6, sparkTop+svgSparkH/2+12, Count(peak))
	p(`<rect x="%d" y="%d" width="%.0f" height="%d" fill="none" stroke="#e0e0e0"/>`+"\n", svgLeft, sparkTop, plotW, svgSparkH)
	p(`<polyline fill="none" stroke="#455a64" stroke-width="1.5" points="`)
	for i, v := range tl.Committed {
		t := tl.From.Add(time.Duration(i)*tl.Bucket + tl.Bucket/2)
		p("%.1f,%.1f ", x(t), float64(sparkTop+svgSparkH)-v/peak*float64(svgSparkH-4))
	}
	p(`"/>` + "\n")

	// Legend.
	ly := sparkTop + svgSparkH + 28
	lx := svgLeft
	for _, item := range []struct{ role, label string }{
		{lab.RoleActive, "active"}, {lab.RoleRevoking, "revoking (asked to release)"}, {lab.RoleLearner, "learner"},
		{lab.RoleStandby, "standby"}, {lab.RoleRestoring, "restoring (owner replays, task waits)"},
	} {
		p(`<rect x="%d" y="%d" width="12" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", lx, ly-9, timelineColors[item.role], lx+16, ly, esc(item.label))
		lx += 28 + 7*len(item.label)
	}
	p(`<rect x="%d" y="%d" width="12" height="10" fill="#e53935"/><text x="%d" y="%d">paused (no worker runs the task)</text>`+"\n", lx, ly-9, lx+16, ly)
	p(`<text x="%d" y="%d" fill="#777">* stateless · time in seconds from the event · hover a bar for details</text>`+"\n", svgLeft, ly+20)
	p("</svg>\n")
	return bw.Flush()
}

// niceStep is a tick interval giving 5 to 12 ticks over span seconds.
func niceStep(span float64) float64 {
	for _, s := range []float64{0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600} {
		if span/s <= 12 {
			return s
		}
	}
	return 1200
}

func tickLabel(t float64) string {
	if math.Abs(t) < 1e-9 {
		return "0"
	}
	return fmt.Sprintf("%+gs", math.Round(t*100)/100)
}

func joinIDs(ids []string) string {
	out := ""
	for i, id := range ids {
		if i > 0 {
			out += ", "
		}
		out += id
	}
	return out
}

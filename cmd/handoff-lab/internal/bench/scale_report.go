package bench

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// writeScaleTable prints one table per size.
func writeScaleTable(w io.Writer, res scaleResults) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	for _, z := range res.Sizes {
		p("\n%d members, %d tasks, session timeout %s (load %.2f → %.2f)\n", z.Members, z.Tasks, Millis(z.SessionTimeoutMS), z.Load[0], z.Load[1])
		if z.Error != "" {
			p("  error: %s\n", z.Error)
		}
		id := z.Idle
		p("  formed (start to balanced)\t%s\n", seconds(z.FormedMS))
		p("  idle member: CPU\t%.3f %% of a core\t(nats-server %.1f %% of a core for the group)\n", id.CPUPerMemberPct, id.ServerCPUPct)
		p("  idle member: NATS messages\t%.2f /s\t(out %.2f, in %.2f; %.0f B/s out, %.0f B/s in; busiest %.2f /s)\n",
			id.Member.msgs(), id.Member.MsgsOut, id.Member.MsgsIn, id.Member.BytesOut, id.Member.BytesIn, id.MemberMax.msgs())
		p("  idle leader: NATS messages\t%.2f /s\t(out %.2f, in %.2f; %.0f B/s out, %.0f B/s in)\n",
			id.Leader.msgs(), id.Leader.MsgsOut, id.Leader.MsgsIn, id.Leader.BytesOut, id.Leader.BytesIn)
		p("  connections, consumers\t%d\t(KV stream %d, changelog %d)\n", id.Connections, id.KVConsumers, id.LogConsumers)
		p("  heap per member\t%.0f KiB\n", z.HeapPerMemberBytes/1024)
		p("  generation record\t%d B\n", z.GenerationBytes)
		p("  leader: plan\t%s\n", statsLine(z.PlanMS))
		p("  leader: publish a generation\t%s\n", statsLine(z.GenerationPublishMS))
		p("  failover (kill to served elsewhere)\t%s\n", statsLine(z.FailoverMS))
		if z.LeaderFailoverMS > 0 {
			p("  leader kill to a new leader's generation\t%s\n", Millis(z.LeaderFailoverMS))
		}
		if z.Warnings > 0 {
			p("  agents' warnings\t%d\t(first: %s)\n", z.Warnings, truncate(z.FirstWarning, 160))
		}
		p("  event\tcount\tbalanced after\tgens\tmoves\twrites\tpause p50/p99/max\tfirst commit p50/p99\tfailover p50/p99/max\tpublish p50/max\tB in per gen (median/max)\n")
		for _, ev := range z.Events {
			bal := seconds(ev.TimeToBalancedMS)
			if !ev.Balanced {
				bal = "not balanced"
			}
			p("  %s\t%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%.0f / %.0f\n", ev.Name, ev.Count, bal, ev.Generations, ev.Moves, ev.Writes,
				triple(ev.PauseMS), pair(ev.FirstCommitMS), triple(ev.FailoverMS),
				fmt.Sprintf("%s / %s", Millis(ev.PublishMS.P50), Millis(ev.PublishMS.Max)), ev.BytesInPerGeneration, ev.BytesInPerGenerationMax)
			if ev.Error != "" {
				p("    error: %s\n", truncate(ev.Error, 200))
			}
		}
	}
	if res.Error != "" {
		p("\nerror: %s\n", res.Error)
	}
	return tw.Flush()
}

func statsLine(st PauseStats) string {
	if st.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("p50 %s, p99 %s, max %s (%d)", Millis(st.P50), Millis(st.P99), Millis(st.Max), st.Count)
}

func triple(st PauseStats) string {
	if st.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s / %s", Millis(st.P50), Millis(st.P99), Millis(st.Max))
}

func pair(st PauseStats) string {
	if st.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s", Millis(st.P50), Millis(st.P99))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// scaleCurve is one figure drawn against the group's size.
type scaleCurve struct {
	title, unit string
	value       func(scaleSize) float64
	target      float64 // drawn as a dashed line when > 0
}

// scaleCurves are the figures writeScaleSVG draws.
var scaleCurves = []scaleCurve{
	{"idle CPU per member", "% of a core", func(z scaleSize) float64 { return z.IdleCPUPerMemberPct }, 0.1},
	{"idle NATS messages per member", "per second", func(z scaleSize) float64 { return z.IdleMsgsPerMemberPerSec }, 1},
	{"idle leader's NATS messages", "per second", func(z scaleSize) float64 { return z.Idle.Leader.msgs() }, 0},
	{"publish a generation (p50)", "ms", func(z scaleSize) float64 { return z.GenerationPublishMS.P50 }, 100},
	{"bytes a bystander receives per generation", "bytes (median member)", func(z scaleSize) float64 {
		return eventFigure(z, eventJoinOne, func(e scaleEvent) float64 { return e.BytesInPerGeneration })
	}, 0},
	{"failover, kill to served elsewhere (max)", "ms", func(z scaleSize) float64 { return z.FailoverMS.Max }, 0},
	{"join of 10 % at once: time to balanced", "ms", func(z scaleSize) float64 {
		return eventFigure(z, eventJoinTenth, func(e scaleEvent) float64 { return e.TimeToBalancedMS })
	}, 10000},
	{"planned-move pause (p50), join of 10 %", "ms", func(z scaleSize) float64 {
		return eventFigure(z, eventJoinTenth, func(e scaleEvent) float64 { return e.PauseMS.P50 })
	}, 0},
	{"heap per member", "KiB", func(z scaleSize) float64 { return z.HeapPerMemberBytes / 1024 }, 0},
}

// eventFigure is one figure of z's event name, or NaN if it was not run.
func eventFigure(z scaleSize, name string, f func(scaleEvent) float64) float64 {
	for _, e := range z.Events {
		if e.Name == name {
			return f(e)
		}
	}
	return math.NaN()
}

// writeScaleSVG draws each figure against the group's size, one small
// chart per figure, members on a log axis.
func writeScaleSVG(w io.Writer, res scaleResults) error {
	const (
		cols, chartW, chartH = 3, 380, 220
		padL, padR, padT     = 56, 16, 40
		padB                 = 36
	)
	rows := (len(scaleCurves) + cols - 1) / cols
	width, height := cols*chartW, rows*chartH+40
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	esc := html.EscapeString
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	var sizes []string
	for _, z := range res.Sizes {
		sizes = append(sizes, fmt.Sprintf("%d (%d tasks)", z.Members, z.Tasks))
	}
	p(`<text x="12" y="22" font-size="14" font-weight="bold">%s</text>`+"\n",
		esc(fmt.Sprintf("handoff at scale: members against each figure; sizes %s; dashed: the target", strings.Join(sizes, ", "))))
	minM, maxM := math.Inf(1), 0.0
	for _, z := range res.Sizes {
		minM, maxM = math.Min(minM, float64(z.Members)), math.Max(maxM, float64(z.Members))
	}
	if maxM <= minM {
		maxM = minM * 10
	}
	for i, c := range scaleCurves {
		ox, oy := (i%cols)*chartW, 40+(i/cols)*chartH
		plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
		top := c.target
		for _, z := range res.Sizes {
			if v := c.value(z); !math.IsNaN(v) {
				top = math.Max(top, v)
			}
		}
		if top <= 0 {
			top = 1
		}
		top *= 1.15
		x := func(m float64) float64 {
			return float64(ox+padL) + (math.Log(m)-math.Log(minM))/(math.Log(maxM)-math.Log(minM))*plotW
		}
		y := func(v float64) float64 { return float64(oy+padT) + plotH - v/top*plotH }
		p(`<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", ox+padL, oy+18, esc(c.title))
		p(`<text x="%d" y="%d" fill="#555">%s</text>`+"\n", ox+padL, oy+31, esc(c.unit))
		p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#999"/>`+"\n", ox+padL, y(0), ox+chartW-padR, y(0))
		p(`<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="#999"/>`+"\n", ox+padL, oy+padT, ox+padL, y(0))
		p(`<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", ox+padL-4, y(top/1.15)+4, esc(shortNum(top/1.15)))
		p(`<text x="%d" y="%.1f" text-anchor="end" fill="#555">0</text>`+"\n", ox+padL-4, y(0)+4)
		if c.target > 0 {
			p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#c62828" stroke-dasharray="4 3"/>`+"\n", ox+padL, y(c.target), ox+chartW-padR, y(c.target))
		}
		var pts []string
		for _, z := range res.Sizes {
			v := c.value(z)
			m := float64(z.Members)
			p(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%d</text>`+"\n", x(m), y(0)+14, z.Members)
			if math.IsNaN(v) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(m), y(v)))
			p(`<circle cx="%.1f" cy="%.1f" r="3" fill="#1565c0"/>`+"\n", x(m), y(v))
			p(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#1565c0">%s</text>`+"\n", x(m), y(v)-6, esc(shortNum(v)))
		}
		if len(pts) > 1 {
			p(`<polyline points="%s" fill="none" stroke="#1565c0" stroke-width="1.5"/>`+"\n", strings.Join(pts, " "))
		}
	}
	p("</svg>\n")
	return bw.Flush()
}

// shortNum prints v with about three significant digits.
func shortNum(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

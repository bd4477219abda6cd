package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/internal/doctest"
	"github.com/handoffhq/handoff/internal/natstest"
	"github.com/handoffhq/handoff/statestore"
)

var update = flag.Bool("update", false, "rewrite the generated parts of docs/flags.md and docs/metrics.md from the code")

// begin opens this binary's generated part of a reference page
// (internal/doctest); the prose around it is written by hand.
var begin = doctest.Begin("./cmd/handoff")

// checkGenerated compares this binary's generated part of the page at path
// with want, or rewrites it with -update.
func checkGenerated(t *testing.T, path, want string) {
	t.Helper()
	doctest.CheckGenerated(t, path, begin, want, *update)
}

// TestDocsFlags keeps docs/flags.md in step with the commands' flags: the
// agent's settings as tables, every other command's --help as it prints it.
func TestDocsFlags(t *testing.T) {
	checkGenerated(t, filepath.Join("..", "..", "docs", "flags.md"), renderFlags(t))
}

func renderFlags(t *testing.T) string {
	var b strings.Builder
	b.WriteString("\n## handoff agent\n\n")
	c := DefaultConfig()
	c.MemberID = "" // the host name: not the same on every machine
	fs := agentFlags(&c)
	for _, section := range []struct {
		title string
		group bool
	}{{"Member settings", false}, {"Group settings", true}} {
		fmt.Fprintf(&b, "### %s\n\n", section.title)
		if section.group {
			b.WriteString("Stored with the group by its first member; a member that sets one of them must agree with the stored value.\n\n")
		}
		b.WriteString("| flag and file key | environment | default | meaning |\n|---|---|---|---|\n")
		fs.VisitAll(func(f *flag.Flag) {
			if _, ok := groupFields[f.Name]; ok != section.group {
				return
			}
			name, usage := flag.UnquoteUsage(f)
			arg := ""
			if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); !isBool && name != "" {
				arg = " " + name
			}
			if f.Name == "config" || f.Name == "print-config" {
				usage += " (not a file key)"
			}
			def := "—"
			if f.DefValue != "" {
				def = "`" + f.DefValue + "`"
			}
			fmt.Fprintf(&b, "| `--%s%s` | `%s` | %s | %s |\n", f.Name, arg, envName(f.Name), def, mdCell(usage))
		})
		b.WriteString("\n")
	}

	names := make([]string, 0, len(commands))
	for n := range commands {
		if n != "agent" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	b.WriteString("## Other commands\n\nAs `handoff <command> --help` prints them.\n\n")
	b.WriteString("```text\n$ handoff --help\n" + helpOutput(t) + "```\n\n")
	for _, n := range names {
		fmt.Fprintf(&b, "### handoff %s\n\n```text\n%s```\n\n", n, helpOutput(t, n))
	}
	return b.String()
}

// helpOutput is what 'handoff args... --help' prints, with no HANDOFF_*
// variables set. The context is cancelled up front: a command that ignored
// --help would stop at once rather than run.
func helpOutput(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
	if err := run(ctx, append(args, "--help"), e); err != nil && !errors.Is(err, flag.ErrHelp) {
		t.Errorf("handoff %s --help: %v", strings.Join(args, " "), err)
	}
	return strings.TrimRight(out.String(), "\n") + "\n"
}

// mdCell escapes text for a Markdown table cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// TestDocsMetrics keeps docs/metrics.md in step with the metrics an agent
// registers: it opens a real agent on a test NATS server with a registry
// and lists what the registry holds.
func TestDocsMetrics(t *testing.T) {
	families := agentMetrics(t)
	checkGenerated(t, filepath.Join("..", "..", "docs", "metrics.md"), renderMetrics(t, families))

	// The prose names only metrics that exist.
	known := map[string]bool{}
	for _, f := range families {
		known[f.GetName()] = true
	}
	series := regexp.MustCompile(`\bhandoff_[a-z_]+`)
	for _, page := range handWrittenDocs {
		for _, name := range series.FindAllString(readDoc(t, page), -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suffix)
			}
			if !known[base] {
				t.Errorf("docs/%s names the metric %s, which the agent does not have", page, name)
			}
		}
	}
}

// handWrittenDocs are the pages of docs/ whose prose names settings and
// metrics.
var handWrittenDocs = []string{"operations.md", "metrics.md", "flags.md"}

func readDoc(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", page))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDocsSettingNames checks that every HANDOFF_* variable the docs name
// is a setting.
func TestDocsSettingNames(t *testing.T) {
	vars := regexp.MustCompile(`\bHANDOFF_[A-Z][A-Z_]*`)
	for _, page := range handWrittenDocs {
		checkSettingNames(t, "docs/"+page, vars.FindAllString(readDoc(t, page), -1))
	}
}

// recordingRegisterer registers into a registry and keeps the collectors,
// so that vectors, which a registry only shows once they have a child, can
// be given one.
type recordingRegisterer struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registry.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// agentMetrics returns the metric families an agent and its API register.
func agentMetrics(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	ns := natstest.Start(t)
	store, err := statestore.Open(t.TempDir(), statestore.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg := &recordingRegisterer{Registry: prometheus.NewPedanticRegistry()}
	ctx, cancel := context.WithTimeout(context.Background(), startDeadline)
	defer cancel()
	a, err := agent.Open(ctx, ns.Conn(t), store, agent.Options{
		Group: "docs", MemberID: "m1", Addr: "127.0.0.1:7070", Capacity: 1,
		Config: DefaultConfig().GroupConfig, Replicas: 1, Logger: zerolog.Nop(), Registerer: reg,
	})
	if err != nil {
		t.Fatalf("open an agent: %v", err)
	}
	defer a.Close()
	httpapi.New(a, httpapi.Options{Registerer: reg}) // the API's metrics

	described := 0
	for _, c := range reg.collectors {
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for range ch {
			described++
		}
		if err := touchVec(c); err != nil {
			t.Fatalf("%v: teach touchVec about it", err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather the agent's metrics: %v", err)
	}
	if len(families) != described {
		t.Fatalf("the agent describes %d metrics but %d were gathered: teach touchVec to show the others", described, len(families))
	}
	return families
}

// touchVec gives a vector one child, with label values "x", so that the
// registry shows it.
func touchVec(c prometheus.Collector) error {
	for n := 0; n <= 8; n++ {
		vals := make([]string, n)
		for i := range vals {
			vals[i] = "x"
		}
		var err error
		switch v := c.(type) {
		case *prometheus.GaugeVec:
			_, err = v.GetMetricWithLabelValues(vals...)
		case *prometheus.CounterVec:
			_, err = v.GetMetricWithLabelValues(vals...)
		case *prometheus.HistogramVec:
			_, err = v.GetMetricWithLabelValues(vals...)
		case *prometheus.SummaryVec:
			_, err = v.GetMetricWithLabelValues(vals...)
		default:
			return nil // not a vector: the registry shows it as it is
		}
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("vector %T takes no label count from 0 to 8", c)
}

func renderMetrics(t *testing.T, families []*dto.MetricFamily) string {
	var b strings.Builder
	b.WriteString("\n| metric | type | labels | meaning |\n|---|---|---|---|\n")
	sort.Slice(families, func(i, j int) bool { return families[i].GetName() < families[j].GetName() })
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "handoff_") {
			t.Errorf("metric %s: name agent metrics handoff_*", f.GetName())
		}
		var labels []string
		if len(f.GetMetric()) > 0 {
			for _, l := range f.GetMetric()[0].GetLabel() {
				labels = append(labels, "`"+l.GetName()+"`")
			}
		}
		typ := strings.ToLower(f.GetType().String())
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.GetName(), typ, strings.Join(labels, ", "), mdCell(f.GetHelp()))
	}
	return b.String() + "\n"
}

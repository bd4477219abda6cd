package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metricsql"
	"gopkg.in/yaml.v3"
)

// The operator's kit: a dashboard and alert rules for a group.
var (
	dashboardFile = filepath.Join(repoRoot, "deploy", "grafana", "handoff-dashboard.json")
	rulesFile     = filepath.Join(repoRoot, "deploy", "prometheus", "handoff-rules.yaml")
)

// promqlFunctions are PromQL's functions and aggregations. The parser
// (MetricsQL, a superset of PromQL, light enough for a test) accepts more;
// an expression that calls anything else would not run on Prometheus.
var promqlFunctions = strings.Fields(`
	abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes
	clamp clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year
	days_in_month deg delta deriv exp floor histogram_avg histogram_count histogram_fraction
	histogram_quantile histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta
	increase irate label_join label_replace last_over_time ln log10 log2 mad_over_time
	max_over_time min_over_time minute month pi predict_linear present_over_time
	quantile_over_time rad rate resets round scalar sgn sin sinh sort sort_by_label
	sort_by_label_desc sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh
	time timestamp vector year
	sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio`)

// checkPromQL parses expr and returns the metric names it reads, or what
// keeps it from running on Prometheus.
func checkPromQL(expr string) ([]string, error) {
	e, err := metricsql.Parse(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var problems []string
	metricsql.VisitAll(e, func(e metricsql.Expr) {
		switch e := e.(type) {
		case *metricsql.MetricExpr:
			for _, lfs := range e.LabelFilterss {
				if len(lfs) > 0 && lfs[0].Label == "__name__" {
					names = append(names, lfs[0].Value)
				}
			}
			if len(e.LabelFilterss) > 1 {
				problems = append(problems, "'or' inside label filters is MetricsQL, not PromQL")
			}
		case *metricsql.FuncExpr:
			if !slices.Contains(promqlFunctions, e.Name) {
				problems = append(problems, fmt.Sprintf("%s() is no PromQL function", e.Name))
			}
			// PromQL has no implicit window: a function over time takes
			// a range vector.
			if metricsql.IsRollupFunc(e.Name) && e.Name != "time" {
				ok := false
				for _, a := range e.Args {
					if r, isRollup := a.(*metricsql.RollupExpr); isRollup && r.Window != nil {
						ok = true
					}
				}
				if !ok {
					problems = append(problems, fmt.Sprintf("%s() needs a range vector ([5m]) in PromQL", e.Name))
				}
			}
		case *metricsql.AggrFuncExpr:
			if !slices.Contains(promqlFunctions, e.Name) {
				problems = append(problems, fmt.Sprintf("%s is no PromQL aggregation", e.Name))
			}
			if e.Limit > 0 {
				problems = append(problems, "an aggregation's limit is MetricsQL, not PromQL")
			}
		}
	})
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return names, nil
}

// exported returns the metric names an agent serves, histograms with their
// series.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	for _, f := range agentMetrics(t) {
		known[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				known[f.GetName()+s] = true
			}
		}
	}
	return known
}

// checkNames fails for each name an agent does not serve.
func checkNames(t *testing.T, where string, names []string, known map[string]bool) {
	t.Helper()
	if len(names) == 0 {
		t.Errorf("%s names no metric", where)
	}
	for _, n := range names {
		if !known[n] {
			t.Errorf("%s reads %s, which the agent does not export (docs/metrics.md lists what it does)", where, n)
		}
	}
}

type promRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestDeployRules checks the alert rules: each parses as PromQL, reads
// only metrics the agent exports, and says what fired and how bad it is;
// and the rules cover what an operator must hear of.
func TestDeployRules(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf promRules
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	known := exported(t)
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			where := fmt.Sprintf("alert %s", r.Alert)
			names, err := checkPromQL(r.Expr)
			if err != nil {
				t.Errorf("%s: expr %q does not parse as PromQL: %v", where, r.Expr, err)
				continue
			}
			checkNames(t, where, names, known)
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", where, r.For, err)
				}
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", where, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want a summary and a description", where)
			}
		}
	}
	for _, want := range []string{"HandoffTaskUnowned", "HandoffLagNotFalling", "HandoffRestoreRefused", "HandoffStoreNotWritable", "HandoffWorkerDetached"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("%s has no alert %s", rulesFile, want)
		}
	}
}

type grafanaPanel struct {
	Type    string         `json:"type"`
	Title   string         `json:"title"`
	Panels  []grafanaPanel `json:"panels"` // a collapsed row's
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// grafanaVars are the dashboard's variables with a value each, for its
// expressions to parse.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$namespace", "ns", "$pod", ".*")

// TestDeployDashboard checks the Grafana dashboard: every panel's query and
// every variable's query parses as PromQL and reads only metrics the agent
// exports, and the dashboard shows what the group's operator watches.
func TestDeployDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string         `json:"title"`
		UID        string         `json:"uid"`
		Panels     []grafanaPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("the dashboard has no title or uid")
	}
	known := exported(t)
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: query %q, want label_values(SELECTOR, LABEL)", v.Name, v.Definition)
			continue
		}
		names, err := checkPromQL(grafanaVars.Replace(m[1]))
		if err != nil {
			t.Errorf("variable %s: %q does not parse as PromQL: %v", v.Name, m[1], err)
			continue
		}
		checkNames(t, "variable "+v.Name, names, known)
	}
	var panels []grafanaPanel
	for _, p := range d.Panels {
		panels = append(panels, p)
		panels = append(panels, p.Panels...)
	}
	read := map[string]bool{}
	for _, p := range panels {
		if p.Type == "row" {
			continue
		}
		where := fmt.Sprintf("panel %q", p.Title)
		if len(p.Targets) == 0 {
			t.Errorf("%s has no query", where)
		}
		for _, q := range p.Targets {
			names, err := checkPromQL(grafanaVars.Replace(q.Expr))
			if err != nil {
				t.Errorf("%s: %q does not parse as PromQL: %v", where, q.Expr, err)
				continue
			}
			checkNames(t, where, names, known)
			for _, n := range names {
				read[n] = true
			}
		}
	}
	// What the issue of a group asks to see: members, owners, learners
	// with their lag and ETA, hand-offs and pauses, commits, errors by
	// code, queries.
	for _, want := range []string{
		"handoff_group_members", "handoff_tasks", "handoff_learner_lag_messages", "handoff_restore_rate_messages_per_second",
		"handoff_handoff_pause_seconds_bucket", "handoff_commits_total", "handoff_api_errors_total", "handoff_queries_total",
	} {
		if !read[want] {
			t.Errorf("no panel of the dashboard reads %s", want)
		}
	}
}

// TestPromQLCheck keeps the check of the kit's expressions able to fail.
func TestPromQLCheck(t *testing.T) {
	for _, tt := range []struct {
		expr string
		ok   bool
	}{
		{`sum by (code) (rate(handoff_api_errors_total{pod=~"a|b"}[5m]))`, true},
		{`histogram_quantile(0.99, sum by (le) (rate(handoff_commit_seconds_bucket[5m])))`, true},
		{`handoff_tasks{role="active"} == 1 or vector(0)`, true},
		{`rate(handoff_commits_total)`, false},        // MetricsQL's implicit window
		{`sum(handoff_commits_total) limit 3`, false}, // MetricsQL's limit
		{`range_median(handoff_commits_total)`, false},
		{`sum(rate(handoff_commits_total[5m])`, false},
	} {
		_, err := checkPromQL(tt.expr)
		if (err == nil) != tt.ok {
			t.Errorf("checkPromQL(%q) = %v, want ok %v", tt.expr, err, tt.ok)
		}
	}
}

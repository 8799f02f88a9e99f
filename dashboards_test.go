package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"
)

// targetLabels are the labels Prometheus and the scrape objects of config/components/monitoring
// put on every series, beside the metrics' own.
var targetLabels = []string{
	"job", "instance", "namespace", "pod", "container", "endpoint", "service",
	"component", "gateway_name", "gateway_namespace",
}

// family is what a dashboard may ask of one metric: its type and label names.
type family struct {
	kind   string
	labels []string
}

// Tests that every PromQL expression of the Grafana dashboards in config/grafana (panel targets
// and variable queries) names only metrics the operator or the proxy registers, with labels
// they carry: the operator's from its registry (as TestOperatorMetricsPassPromlint builds it),
// the proxy's from proxy/testdata/metrics.txt, which the proxy module's
// TestMetricsPassPromlint keeps equal to its registry.
func TestDashboardsUseRegisteredMetrics(t *testing.T) {
	known := operatorFamilies(operatorMetrics(t))
	for name, f := range proxyFamilies(t) {
		known[name] = f
	}
	files, err := filepath.Glob(filepath.Join("config", "grafana", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in config/grafana (%v)", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			exprs := dashboardExprs(t, file)
			if len(exprs) == 0 {
				t.Fatal("no PromQL expression found")
			}
			for _, e := range exprs {
				checkExpr(t, known, e)
			}
		})
	}
}

// Tests that every alert expression of the PrometheusRule in config/components/monitoring (the
// chart renders the same, TestChartRendersKustomizeObjects compares them) names only metrics
// the operator or the proxy registers, with labels they carry.
func TestAlertRulesUseRegisteredMetrics(t *testing.T) {
	known := operatorFamilies(operatorMetrics(t))
	for name, f := range proxyFamilies(t) {
		known[name] = f
	}
	b, err := os.ReadFile(filepath.Join("config", "components", "monitoring", "controller_prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &rule); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			t.Run(r.Alert, func(t *testing.T) { checkExpr(t, known, r.Expr) })
			n++
		}
	}
	if n == 0 {
		t.Fatal("no alert rule found")
	}
}

// checkExpr fails t unless every metric e names is known, and every label it uses is on one of
// its metrics or one Prometheus adds.
func checkExpr(t *testing.T, known map[string]family, e string) {
	t.Helper()
	names, labels := promqlNames(e)
	if len(names) == 0 {
		t.Errorf("%q names no metric", e)
	}
	allowed := slices.Clone(targetLabels)
	for _, n := range names {
		f, ok := lookup(known, n)
		if !ok {
			t.Errorf("%q: no binary registers %s", e, n)
			continue
		}
		allowed = append(allowed, f.labels...)
		if f.kind == "histogram" && strings.HasSuffix(n, "_bucket") {
			allowed = append(allowed, "le")
		}
	}
	for _, l := range labels {
		if !slices.Contains(allowed, l) {
			t.Errorf("%q: label %s is on none of its metrics %v", e, l, names)
		}
	}
}

// Tests the PromQL name scanner on the forms the dashboards use.
func TestPromqlNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr          string
		names, labels []string
	}{
		{`sum by (route) (rate(a_total{code=~"5..", x="a{b}"}[$__rate_interval])) / sum by (route) (rate(a_total[5m]))`, []string{"a_total"}, []string{"route", "code", "x"}},
		{`histogram_quantile(0.99, sum by (g, le) (rate(h_seconds_bucket{p=~"$pod"}[1m])))`, []string{"h_seconds_bucket"}, []string{"g", "le", "p"}},
		{`label_values(m_state{namespace=~"$namespace"}, pod)`, []string{"m_state"}, []string{"namespace", "pod"}},
		{`m == 1 and on (pod) n > 2e3`, []string{"m", "n"}, []string{"pod"}},
	} {
		names, labels := promqlNames(tc.expr)
		if !slices.Equal(names, tc.names) || !slices.Equal(labels, tc.labels) {
			t.Errorf("promqlNames(%q) = %v, %v; want %v, %v", tc.expr, names, labels, tc.names, tc.labels)
		}
	}
}

// lookup finds the family of a series name: the name itself, or a histogram or summary whose
// _bucket, _sum or _count series it is.
func lookup(known map[string]family, name string) (family, bool) {
	if f, ok := known[name]; ok {
		return f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := known[base]; ok && (f.kind == "histogram" || (f.kind == "summary" && suffix != "_bucket")) {
				return f, true
			}
		}
	}
	return family{}, false
}

func operatorFamilies(mfs []*dto.MetricFamily) map[string]family {
	out := map[string]family{}
	for _, mf := range mfs {
		var labels []string
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		out[mf.GetName()] = family{kind: strings.ToLower(mf.GetType().String()), labels: labels}
	}
	return out
}

// proxyFamilies reads proxy/testdata/metrics.txt: "name type [label,label...]" a line.
func proxyFamilies(t *testing.T) map[string]family {
	t.Helper()
	f, err := os.Open(filepath.Join("proxy", "testdata", "metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]family{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			t.Fatalf("proxy/testdata/metrics.txt: malformed line %q", sc.Text())
		}
		fam := family{kind: fields[1]}
		if len(fields) > 2 {
			fam.labels = strings.Split(fields[2], ",")
		}
		out[fields[0]] = fam
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// dashboardExprs returns the PromQL of a dashboard: every target's expr, in panels and in the
// panels of rows, and every query variable's query.
func dashboardExprs(t *testing.T, file string) []string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr string `json:"expr"`
	}
	type panel struct {
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var d struct {
		UID        string  `json:"uid"`
		Title      string  `json:"title"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("not a dashboard: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: both are needed to import it", d.UID, d.Title)
	}
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("panel %q has a target without an expression", p.Title)
				}
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Errorf("variable query %s: %v", v.Query, err)
		}
		out = append(out, q.Query)
	}
	return out
}

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promqlMatchers = regexp.MustCompile(`\{([^}]*)\}`)
	promqlMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	promqlToken    = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
	promqlIdent    = regexp.MustCompile(`[a-zA-Z_][a-zA-Z0-9_]*`)
)

var promqlKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or", "unless", "inf", "nan"}

// promqlNames returns the metric names and label names a PromQL expression (or a Grafana
// label_values query) uses, each once in order of appearance. It is a scanner, not a parser:
// strings and ranges are dropped, grouping clauses and matchers give labels, and what remains
// that is neither a number, a function call nor a keyword is a metric name; the last argument
// of label_values is a label.
func promqlNames(expr string) (names, labels []string) {
	add := func(list *[]string, s string) {
		if !slices.Contains(*list, s) {
			*list = append(*list, s)
		}
	}
	if inner, ok := strings.CutPrefix(strings.TrimSpace(expr), "label_values("); ok {
		inner = strings.TrimSuffix(strings.TrimSpace(inner), ")")
		if i := strings.LastIndex(inner, ","); i >= 0 {
			defer func() { add(&labels, strings.TrimSpace(inner[i+1:])) }()
			expr = inner[:i]
		}
	}
	e := promqlStrings.ReplaceAllString(expr, `""`)
	e = promqlRanges.ReplaceAllString(e, " ")
	for _, m := range promqlGrouping.FindAllStringSubmatch(e, -1) {
		for _, l := range promqlIdent.FindAllString(m[1], -1) {
			add(&labels, l)
		}
	}
	e = promqlGrouping.ReplaceAllString(e, " ")
	for _, m := range promqlMatchers.FindAllStringSubmatch(e, -1) {
		for _, l := range promqlMatcher.FindAllStringSubmatch(m[1], -1) {
			add(&labels, l[1])
		}
	}
	e = promqlMatchers.ReplaceAllString(e, " ")
	for _, tok := range promqlToken.FindAllString(e, -1) {
		if tok[0] >= '0' && tok[0] <= '9' || strings.HasSuffix(tok, "(") {
			continue
		}
		tok = strings.TrimSpace(tok)
		if slices.Contains(promqlKeywords, strings.ToLower(tok)) {
			continue
		}
		add(&names, tok)
	}
	return names, labels
}

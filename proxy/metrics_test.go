package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"coxswain.dev/coxswain/proxy/internal/health"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.txt from the proxy's registry")

// metricsFile lists the proxy's own metrics (name, type, labels), read by the operator module's
// test of the Grafana dashboards in config/grafana, which cannot build this registry itself.
const metricsFile = "testdata/metrics.txt"

// lintAllowed are the promlint problems accepted, by metric and text, each with why.
var lintAllowed = map[string]string{}

// Tests that every metric the proxy registers follows the Prometheus naming conventions
// (promlint: units, _total on counters, snake case, help text), and that testdata/metrics.txt
// lists the proxy's metrics as they are.
func TestMetricsPassPromlint(t *testing.T) {
	t.Parallel()
	o := metricsTestOptions(t)
	rec := &recorder{Registry: prometheus.NewRegistry()}
	// What newProcess registers, on a recorder that keeps the collectors.
	rec.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, err := health.NewTracker(nil, rec); err != nil {
		t.Fatal(err)
	}
	plane, err := newDataPlane(o, rec, nil, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plane.Shutdown(t.Context()) })
	families := rec.gatherAll(t)
	lint(t, families)
	requireSameAsProcess(t, o, rec, families)

	got := listing(families, "coxswain_")
	if *update {
		if err := os.WriteFile(metricsFile, []byte(got), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(metricsFile)
	if err != nil {
		t.Fatalf("%v (run go test -run TestMetricsPassPromlint -update)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s is stale: run go test -run TestMetricsPassPromlint -update, and check the dashboards in config/grafana (-file +registry):\n%s", metricsFile, diff)
	}
}

// metricsTestOptions are flags that turn on every optional metric: the access log (on by
// default) and the memory watermark's overload gauge.
func metricsTestOptions(t *testing.T) *options {
	t.Helper()
	dir := t.TempDir()
	o, err := parseFlags([]string{
		"--discovery-endpoint=127.0.0.1:1", "--discovery-server-name=discovery.test", "--node-id=proxy-0",
		"--health-address=127.0.0.1:0", "--token-path=" + filepath.Join(dir, "token"),
		"--trust-bundle-path=" + filepath.Join(dir, "ca.crt"), "--memory-watermark-bytes=1073741824",
		"--admin-address=",
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// requireSameAsProcess checks that the recorder holds what newProcess registers: every family
// the process's registry gathers is one the recorder has, and every collector the recorder has
// is already on the process's registry.
func requireSameAsProcess(t *testing.T, o *options, rec *recorder, families []*dto.MetricFamily) {
	t.Helper()
	p, err := newProcess(t.Context(), o, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.lis.Close()
		_ = p.plane.Shutdown(t.Context())
	})
	known := map[string]bool{}
	for _, f := range families {
		known[f.GetName()] = true
	}
	gathered, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range gathered {
		if !known[f.GetName()] {
			t.Errorf("newProcess registers %s, which this test does not: register it here too", f.GetName())
		}
	}
	for _, c := range rec.collectors {
		var are prometheus.AlreadyRegisteredError
		if err := p.reg.Register(c); !errors.As(err, &are) {
			t.Errorf("newProcess does not register %v (register: %v)", descNames(c), err)
		}
	}
}

func lint(t *testing.T, families []*dto.MetricFamily) {
	t.Helper()
	problems, err := promlint.NewWithMetricFamilies(families).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if _, ok := lintAllowed[p.Metric+": "+p.Text]; !ok {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}

// recorder registers on its registry and keeps every collector, so that each vector can be given
// a child: a vector without one is not gathered, and its name would go unlinted.
type recorder struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// gatherAll gives every vector one child and gathers, requiring every described metric to be
// gathered.
func (r *recorder) gatherAll(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	for _, c := range r.collectors {
		withChild(t, c)
	}
	families, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gathered := map[string]bool{}
	for _, f := range families {
		gathered[f.GetName()] = true
	}
	for _, c := range r.collectors {
		for _, name := range descNames(c) {
			if !gathered[name] {
				t.Errorf("%s is registered but not gathered: give it a sample here so that it is linted", name)
			}
		}
	}
	return families
}

var (
	descName   = regexp.MustCompile(`^Desc\{fqName: "([^"]*)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// withChild creates one child of a vector, with a placeholder for each of its labels.
func withChild(t *testing.T, c prometheus.Collector) {
	t.Helper()
	descs := describe(c)
	if len(descs) != 1 {
		return
	}
	m := descLabels.FindStringSubmatch(descs[0].String())
	var values []string
	if m != nil && m[1] != "" {
		values = make([]string, len(strings.Split(m[1], ",")))
		for i := range values {
			values[i] = "x"
		}
	}
	var err error
	switch v := c.(type) {
	case *prometheus.CounterVec:
		_, err = v.GetMetricWithLabelValues(values...)
	case *prometheus.GaugeVec:
		_, err = v.GetMetricWithLabelValues(values...)
	case *prometheus.HistogramVec:
		_, err = v.GetMetricWithLabelValues(values...)
	case *prometheus.SummaryVec:
		_, err = v.GetMetricWithLabelValues(values...)
	}
	if err != nil {
		t.Fatalf("child of %s: %v", descs[0], err)
	}
}

func describe(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

func descNames(c prometheus.Collector) []string {
	var out []string
	for _, d := range describe(c) {
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// listing is one line per family whose name has prefix: name, type and label names (if any).
func listing(families []*dto.MetricFamily, prefix string) string {
	var b strings.Builder
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), prefix) {
			continue
		}
		var labels []string
		if ms := f.GetMetric(); len(ms) > 0 {
			for _, l := range ms[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		slices.Sort(labels)
		fmt.Fprintf(&b, "%s %s", f.GetName(), strings.ToLower(f.GetType().String()))
		if len(labels) > 0 {
			fmt.Fprintf(&b, " %s", strings.Join(labels, ","))
		}
		b.WriteString("\n")
	}
	return b.String()
}

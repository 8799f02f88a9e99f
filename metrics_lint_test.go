package main

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"coxswain.dev/coxswain/controllers"
	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/server/bootstrap"
	snapcache "coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/internal/rebuild"
	"coxswain.dev/coxswain/internal/scopeauth"
	"coxswain.dev/coxswain/internal/state"
	"coxswain.dev/coxswain/internal/testlog"
)

// lintAllowed are the promlint problems accepted in the operator's registry, by "metric: text",
// each with why. The operator's own metrics have none; controller-runtime's and client-go's
// names are theirs, and dashboards and alerts everywhere depend on them.
var lintAllowed = map[string]string{}

// Tests that every metric the operator serves follows the Prometheus naming conventions
// (promlint: units, _total on counters, snake case, help text): its own, registered as main.go
// and the discovery server's generations register them, and those of controller-runtime and
// client-go on the same registry, given samples by a controller run against the API server.
func TestOperatorMetricsPassPromlint(t *testing.T) {
	problems, err := promlint.NewWithMetricFamilies(operatorMetrics(t)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if _, ok := lintAllowed[p.Metric+": "+p.Text]; !ok {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}

var operator struct {
	sync.Mutex
	families []*dto.MetricFamily
}

// operatorMetrics gathers controller-runtime's registry, which the operator's metrics endpoint
// serves, once it holds what the operator registers on it: the rebuild and provisioning
// metrics (setupGatewayAPI), the bootstrap and stream servers' (each discovery generation), and
// controller-runtime's own, whose vectors a controller's run fills. Every vector of ours gets a
// child, so that none goes ungathered.
func operatorMetrics(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	operator.Lock()
	defer operator.Unlock()
	if operator.families != nil {
		return operator.families
	}
	rec := &recorder{Registerer: crmetrics.Registry}
	m, err := rebuild.NewMetrics(rec)
	if err != nil {
		t.Fatal(err)
	}
	// A rebuild of an empty cluster measures the shared pool's snapshot, which the scope
	// collector reports.
	p := &rebuild.Pipeline{Cache: snapcache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false }, Metrics: m}
	if _, err := p.Rebuild(t.Context(), rebuild.Input{State: state.New()}); err != nil {
		t.Fatal(err)
	}
	if _, err := controllers.NewProvisionMetrics(rec); err != nil {
		t.Fatal(err)
	}
	registerDiscoveryMetrics(t, rec)
	runController(t)
	for _, c := range rec.collectors {
		withChild(t, c)
	}
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gathered := map[string]bool{}
	for _, f := range families {
		gathered[f.GetName()] = true
	}
	for _, c := range rec.collectors {
		for _, name := range descNames(c) {
			if !gathered[name] {
				t.Fatalf("%s is registered but not gathered: give it a sample here so that it is linted", name)
			}
		}
	}
	operator.families = families
	return families
}

// registerDiscoveryMetrics builds the bootstrap and stream servers as a discovery generation
// does (internal/discoveryserver), with dependencies that are never called, and a snapshot in
// the cache so that the encoded size of its scope is reported.
func registerDiscoveryMetrics(t *testing.T, reg prometheus.Registerer) {
	t.Helper()
	td, err := spiffe.ParseTrustDomain("cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bootstrap.NewConnections(bootstrap.ConnectionsConfig{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	var deps inert
	if _, err := bootstrap.New(bootstrap.Config{TrustDomain: td, Authenticator: deps, Allowlist: deps, CA: deps, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	snapshots := snapcache.New(nil)
	if _, err := snapshots.Set(snapcache.SharedPool(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.New(stream.Config{TrustDomain: td, Bundles: deps, Cache: snapshots, Scopes: deps, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
}

// inert stands in for the discovery servers' dependencies, which building them does not call.
type inert struct{}

var errInert = errors.New("not served in this test")

func (inert) Authenticate(context.Context, string) (bootstrap.Principal, error) {
	return bootstrap.Principal{}, errInert
}
func (inert) Allowed(string, string) bool                           { return false }
func (inert) Current() (*pki.CA, *pki.Bundle, error)                { return nil, nil, errInert }
func (inert) Bundle() (*pki.Bundle, error)                          { return nil, errInert }
func (inert) ExpectedServiceAccount(string, string) (string, error) { return "", errInert }

// runController starts a manager with one controller against the suite's API server until it
// reconciled a ConfigMap, so that controller-runtime's reconcile and work queue vectors and client-go's
// request vectors have children.
func runController(t *testing.T) {
	t.Helper()
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Logger: testlog.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	const name = "metricslint"
	reconciled := make(chan struct{})
	var once sync.Once
	err = ctrl.NewControllerManagedBy(mgr).Named(name).For(&corev1.ConfigMap{}).
		Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			if req.Name == name {
				once.Do(func() { close(reconciled) })
			}
			return reconcile.Result{}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}}
	if err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(cm.Namespace).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(cm.Namespace).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var timedOut bool
	select {
	case <-reconciled:
	case <-time.After(30 * time.Second):
		timedOut = true
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if timedOut {
		t.Fatal("the controller did not reconcile its ConfigMap within 30s")
	}
}

// recorder registers on its Registerer and keeps every collector, so that each vector can be
// given a child: a vector without one is not gathered, and its name would go unlinted.
type recorder struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
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
		values = slices.Repeat([]string{"x"}, len(strings.Split(m[1], ",")))
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

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The route propagation benchmark. It is a test of the e2e package because it needs what the
// suite builds (a real API server, the operator and the shared proxy as processes, inside
// private namespaces), and it is switched off unless EnvPropagation is set: `make
// bench-propagation` runs it.
const (
	// EnvPropagation switches TestRoutePropagation on.
	EnvPropagation = "COXSWAIN_BENCH_PROPAGATION"
	// EnvPropagationOut names a file the results table is written to, in Markdown.
	EnvPropagationOut = "COXSWAIN_BENCH_PROPAGATION_OUT"
	// EnvPropagationSizes replaces propagationSizes with a comma-separated list of route counts,
	// ascending (for example "3000" to measure the largest size alone).
	EnvPropagationSizes = "COXSWAIN_BENCH_PROPAGATION_SIZES"
	// EnvPropagationProfiles names a directory: the operator and the shared proxy then serve
	// runtime profiles, and CPU profiles of both over the probes at the largest size without
	// churn are written there (operator.pprof, proxy.pprof).
	EnvPropagationProfiles = "COXSWAIN_BENCH_PROPAGATION_PROFILES"

	// pollEvery is how often a probe asks whether its change is live.
	pollEvery = 2 * time.Millisecond
	// probeTimeout bounds one measurement; a change not live by then is counted as an error.
	probeTimeout = 10 * time.Second
	// churnPerSecond is the rate of route edits in the "under churn" runs.
	churnPerSecond = 50
)

// propagationSizes are the numbers of routes already present when the probes run.
var propagationSizes = []int{1, 1000, 3000}

// propagationSamples is the number of probes of each kind at each size.
const propagationSamples = 40

// TestRoutePropagation measures, through the real proxy, how long a change takes to be served:
// an HTTPRoute from Create to its first 200, from Delete to its first 404, and an EndpointSlice
// change from Update to the first answer of the new backend; with 1, 1,000 and 3,000 routes
// already present, alone and while 50 other routes are edited every second. Every answer that
// is neither the old nor the new state is counted as an error.
func TestRoutePropagation(t *testing.T) {
	if os.Getenv(EnvPropagation) == "" {
		t.Skip(EnvPropagation + " is not set: the propagation benchmark runs only on request (make bench-propagation)")
	}
	if !InNamespace() {
		t.Skip(EnvSwitch + "=skip: the benchmark runs only inside its private namespaces")
	}
	s := newSuite(t)
	profiles := os.Getenv(EnvPropagationProfiles)
	s.profile = profiles != ""
	s.metrics = true
	s.runScenarios([]scenario{
		{operatorReady, nil, s.operatorBecomesReady},
		{proxyReady, []string{operatorReady}, s.sharedProxyBecomesReady},
		{routed, []string{proxyReady}, s.routeIsServed},
	})
	if t.Failed() {
		return
	}
	ctx := t.Context()
	other, err := StartBackend(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	b := &propagation{s: s, c: NewClient(loopback(s.gatewayPort), false), other: other}
	defer b.c.CloseIdle()
	b.setUpShift(ctx, t)

	sizes := propagationSizes
	if v := os.Getenv(EnvPropagationSizes); v != "" {
		sizes = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || (len(sizes) > 0 && n < sizes[len(sizes)-1]) {
				t.Fatalf("%s=%q: want ascending route counts, comma-separated", EnvPropagationSizes, v)
			}
			sizes = append(sizes, n)
		}
	}
	var rows []propagationRow
	for _, size := range sizes {
		b.fill(ctx, t, size)
		for _, churn := range []bool{false, true} {
			stop := func() int64 { return 0 }
			if churn {
				stop = b.churn(ctx, t)
			}
			var profiled func()
			if profiles != "" && size == sizes[len(sizes)-1] && !churn {
				profiled = s.profileCPU(ctx, t, profiles)
			}
			create, remove, shift := b.probe(ctx, t)
			if profiled != nil {
				profiled()
			}
			edits := stop()
			label := fmt.Sprintf("%d routes", size)
			if churn {
				label += fmt.Sprintf(", %d edits/s", churnPerSecond)
				t.Logf("%s: %d edits made during the probes", label, edits)
			}
			rows = append(rows,
				propagationRow{label, "HTTPRoute create to first 200", create},
				propagationRow{label, "HTTPRoute delete to first 404", remove},
				propagationRow{label, "endpoint change to the new backend", shift},
			)
		}
	}
	table := propagationTable(rows)
	t.Log("\n" + table)
	if out := os.Getenv(EnvPropagationOut); out != "" {
		if err := os.WriteFile(out, []byte(table), 0o644); err != nil { //nolint:gosec // a report, not a secret
			t.Error(err)
		}
	}
}

// propagation holds the benchmark's state: the client through the shared proxy, the second
// backend the endpoint probes shift to, and the background routes present so far.
type propagation struct {
	s     *suite
	c     *Client
	other *Backend

	mu     sync.Mutex
	routes []*gwapiv1.HTTPRoute // background routes, as last written
}

// samples are durations of one kind of probe, and the answers that were wrong meanwhile.
type samples struct {
	d      []time.Duration
	errors int
	lost   int // probes that never saw their change within probeTimeout
	// operator splits the probes' time by the operator's metrics.
	operator breakdown
}

type propagationRow struct {
	size, what string
	samples
}

// fill creates background routes, each with its own hostname, until n are present, and waits
// until the last one is served.
func (b *propagation) fill(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	start, have := time.Now(), len(b.routes)
	if have >= n {
		return
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Value
	created := make([]*gwapiv1.HTTPRoute, n-have)
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				r := HTTPRoute(Route{
					Namespace: appNamespace, Name: fmt.Sprintf("bg-%d", i), Gateway: gatewayName,
					Hostname: fmt.Sprintf("bg-%d.example.com", i), PathPrefix: "/", AddHeader: "x-edit", AddValue: "0",
					Service: serviceName,
				})
				if err := b.s.cluster.Client.Create(ctx, r); err != nil {
					failed.Store(err)
					continue
				}
				created[i-have] = r
			}
		})
	}
	for i := have; i < n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("create background routes: %v", err)
	}
	b.routes = append(b.routes, created...)
	last := fmt.Sprintf("bg-%d.example.com", n-1)
	if err := Poll(ctx, 5*time.Minute, 50*time.Millisecond, func(ctx context.Context) error {
		resp, err := b.c.Get(ctx, last, "/")
		if err != nil {
			return err
		}
		_, err = resp.Echo()
		return err
	}); err != nil {
		t.Fatalf("the last of %d background routes was never served: %v", n, err)
	}
	t.Logf("%d background routes present and served after %s", n, time.Since(start).Round(time.Millisecond))
}

// churn edits background routes at churnPerSecond until the returned function is called, which
// returns how many edits were made.
func (b *propagation) churn(ctx context.Context, t *testing.T) func() int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var edits atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second / churnPerSecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			b.mu.Lock()
			r := b.routes[i%len(b.routes)]
			b.mu.Unlock()
			next := r.DeepCopy()
			next.Spec.Rules[0].Filters[0].RequestHeaderModifier.Add[0].Value = fmt.Sprint(i)
			if err := b.s.cluster.Client.Patch(ctx, next, client.MergeFrom(r)); err != nil {
				if ctx.Err() == nil {
					t.Errorf("edit route %s: %v", r.Name, err)
				}
				continue
			}
			b.mu.Lock()
			b.routes[i%len(b.routes)] = next
			b.mu.Unlock()
			edits.Add(1)
		}
	}()
	return func() int64 {
		cancel()
		<-done
		return edits.Load()
	}
}

// probe measures propagationSamples creates, deletes and endpoint shifts.
func (b *propagation) probe(ctx context.Context, t *testing.T) (create, remove, shift samples) {
	t.Helper()
	for i := range propagationSamples {
		name := fmt.Sprintf("probe-%d-%d", len(b.routes), i)
		host := name + ".example.com"
		r := HTTPRoute(Route{Namespace: appNamespace, Name: name, Gateway: gatewayName, Hostname: host, PathPrefix: "/", Service: serviceName})
		before := b.scrapeOperator(ctx, t, 0)
		start := time.Now()
		if err := b.s.cluster.Client.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		create.add(b.until(ctx, start, host, http.StatusOK, http.StatusNotFound, ""))
		created := b.scrapeOperator(ctx, t, before.convergeN+1)
		create.operator.add(before, created)
		start = time.Now()
		if err := b.s.cluster.Client.Delete(ctx, r); err != nil {
			t.Fatal(err)
		}
		remove.add(b.until(ctx, start, host, http.StatusNotFound, http.StatusOK, ""))
		remove.operator.add(created, b.scrapeOperator(ctx, t, created.convergeN+1))
	}
	for i := range propagationSamples {
		to, from := b.other, b.s.backend
		if i%2 == 1 {
			to, from = from, to
		}
		before := b.scrapeOperator(ctx, t, 0)
		start := time.Now()
		b.pointShiftAt(ctx, t, to)
		shift.add(b.until(ctx, start, shiftHost, http.StatusOK, http.StatusOK, to.Name, from.Name))
		shift.operator.add(before, b.scrapeOperator(ctx, t, before.convergeN+1))
	}
	return create, remove, shift
}

// shiftHost is served by a route to the Service whose endpoints the shift probes move.
const (
	shiftHost    = "shift.example.com"
	shiftService = "shift"
)

// setUpShift creates the Service the endpoint probes move between the two backends, and its
// route, and waits until it is served by the suite's backend.
func (b *propagation) setUpShift(ctx context.Context, t *testing.T) {
	t.Helper()
	svc, slice := BackendService(appNamespace, shiftService, b.s.backend)
	route := HTTPRoute(Route{Namespace: appNamespace, Name: shiftService, Gateway: gatewayName, Hostname: shiftHost, PathPrefix: "/", Service: shiftService})
	for _, obj := range []client.Object{svc, slice, route} {
		if err := b.s.cluster.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.until(ctx, time.Now(), shiftHost, http.StatusOK, http.StatusNotFound, b.s.backend.Name); got.err != nil {
		t.Fatalf("the shift route was never served: %v", got.err)
	}
}

// pointShiftAt rewrites the shift Service's EndpointSlice to send it to backend to.
func (b *propagation) pointShiftAt(ctx context.Context, t *testing.T, to *Backend) {
	t.Helper()
	_, want := BackendService(appNamespace, shiftService, to)
	var cur discoveryv1.EndpointSlice
	if err := b.s.cluster.Client.Get(ctx, types.NamespacedName{Namespace: want.Namespace, Name: want.Name}, &cur); err != nil {
		t.Fatal(err)
	}
	cur.Endpoints, cur.Ports = want.Endpoints, want.Ports
	if err := b.s.cluster.Client.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
}

// result is one probe: how long until the change was live, and how many wrong answers came
// meanwhile.
type result struct {
	d      time.Duration
	errors int
	err    error // the change was never seen
}

func (s *samples) add(r result) {
	s.errors += r.errors
	if r.err != nil {
		s.lost++
		return
	}
	s.d = append(s.d, r.d)
}

// until polls host every pollEvery until it answers want (and, when backend is set, from that
// backend), and returns the time since start. An answer of status before (from backend before,
// when given) is the change not live yet; anything else is an error.
func (b *propagation) until(ctx context.Context, start time.Time, host string, want, before int, backend string, beforeBackend ...string) result {
	var r result
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	for {
		resp, err := b.c.Get(ctx, host, "/probe")
		switch {
		case err != nil && ctx.Err() != nil:
			r.err = fmt.Errorf("%s not live after %s: %w", host, probeTimeout, err)
			return r
		case err != nil:
			r.errors++
		case resp.Code == want && backend == "":
			r.d = time.Since(start)
			return r
		case resp.Code == want:
			echo, err := resp.Echo()
			switch {
			case err != nil:
				r.errors++
			case echo.Backend == backend:
				r.d = time.Since(start)
				return r
			case !slices.Contains(beforeBackend, echo.Backend):
				r.errors++
			}
		case resp.Code != before:
			r.errors++
		}
		select {
		case <-ctx.Done():
			r.err = fmt.Errorf("%s not live after %s", host, probeTimeout)
			return r
		case <-time.After(pollEvery):
		}
	}
}

// percentile returns the p-th percentile (0 to 100) of d by the nearest-rank method.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sorted := slices.Clone(d)
	slices.Sort(sorted)
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

func propagationTable(rows []propagationRow) string {
	var sb strings.Builder
	sb.WriteString("| routes present | change | samples | p50 | p99 | max | wrong answers | never live | watch event to last ACK, p50 / p99 | rebuild p50 | rebuilds per probe |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
	for _, r := range rows {
		op := r.operator
		fmt.Fprintf(&sb, "| %s | %s | %d | %s | %s | %s | %d | %d | %s / %s | %s | %.1f |\n", r.size, r.what, len(r.d),
			ms(percentile(r.d, 50)), ms(percentile(r.d, 99)), ms(percentile(r.d, 100)), r.errors, r.lost,
			ms(percentile(op.converge, 50)), ms(percentile(op.converge, 99)), ms(percentile(op.rebuild, 50)), op.meanRebuilds())
	}
	return sb.String()
}

// profiledSeconds is how long the CPU profiles of the probes at the largest size run: about
// the probes' own duration there.
const profiledSeconds = 20

// profileCPU starts CPU profiles of the operator and the shared proxy, and returns a function
// that waits for them and writes them into dir.
func (s *suite) profileCPU(ctx context.Context, t *testing.T, dir string) func() {
	t.Helper()
	targets := map[string]string{
		"operator": loopback(OperatorPprofPort),
		"proxy":    s.shared.opts.HealthAddr(),
	}
	var wg sync.WaitGroup
	for name, addr := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, profiledSeconds)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("CPU profile of the %s: %v", name, err)
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("CPU profile of the %s: status %d, %v", name, resp.StatusCode, err)
				return
			}
			path := filepath.Join(dir, name+".pprof")
			if err := os.WriteFile(path, body, 0o644); err != nil { //nolint:gosec // a profile, not a secret
				t.Error(err)
				return
			}
			t.Logf("CPU profile of the %s over %d s of probes: %s", name, profiledSeconds, path)
		}()
	}
	return wg.Wait
}

package discoveryserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"coxswain.dev/coxswain/api/v1alpha1"
	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// Backoff of the storm's proxies after a RESOURCE_EXHAUSTED, as the proxy agent's
// DefaultBackoff: retry n waits 250 ms·2ⁿ, capped at 30 s, stretched by up to 20%.
const (
	stormBackoffBase   = 250 * time.Millisecond
	stormBackoffMax    = 30 * time.Second
	stormBackoffJitter = 0.2
)

// stormProxy is one proxy of the storm: its token file, the loopback address it dials from, and
// what its bootstrap came to.
type stormProxy struct {
	tokenPath string
	source    net.IP

	svid      *client.SVID
	err       error
	attempts  int
	exhausted int
	took      time.Duration
}

// Measures a bootstrap storm: 1,000 shared pool proxies, each with its own pod-bound token
// (TokenRequest) and its own loopback source address, bootstrap at once against the real
// bootstrap listener of a controller replica, whose every bootstrap costs a TokenReview and a
// pod read on the real kube-apiserver. Each proxy retries RESOURCE_EXHAUSTED (the listener's
// admission bounds) with the supervisor's backoff; every other error fails the test, and so
// does a proxy that ends without an SVID of its identity. Set COXSWAIN_MEASURE=1 to run it.
func TestMeasureBootstrapStorm(t *testing.T) {
	if os.Getenv("COXSWAIN_MEASURE") == "" {
		t.Skip("set COXSWAIN_MEASURE=1 to measure")
	}
	proxies := 1000
	if n, err := strconv.Atoi(os.Getenv("COXSWAIN_STORM_PROXIES")); err == nil && n > 0 {
		proxies = n
	}
	ns := newNamespace(t, "bootstrap-storm")
	fast := rest.CopyConfig(restConfig)
	fast.QPS, fast.Burst = -1, 0 // as main.go's ctrl.GetConfig: no client-side rate limit
	setupClient, err := kubernetes.NewForConfig(fast)
	if err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: wellknown.SharedProxyServiceAccount}}
	if _, err := setupClient.CoreV1().ServiceAccounts(ns).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setupStart := time.Now()
	fleet := newStormFleet(t, setupClient, ns, proxies)
	t.Logf("created %d pods and pod-bound tokens in %v", proxies, time.Since(setupStart).Round(time.Millisecond))

	c := startStormController(t, fast, ns)
	addrs := c.waitListening(t, serving)
	c.waitCondition(t, v1alpha1.ConditionTrustBundlePublished, metav1.ConditionTrue, "Published")
	bundlePath := writeTrustBundle(t, ns)
	cfg := client.BootstrapConfig{
		Address: addrs.Bootstrap, ServerName: wellknown.DiscoveryServiceName + "." + ns + ".svc",
		Controller: tlsconfig.AuthorizeServiceAccount(ns, wellknown.ControllerServiceAccount),
		BundlePath: bundlePath,
		Scope:      &discoveryv1.Scope{Kind: &discoveryv1.Scope_SharedPool{SharedPool: &discoveryv1.SharedPool{}}},
	}

	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range fleet {
		wg.Go(func() {
			<-start
			p.bootstrap(t.Context(), cfg)
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)

	want := "spiffe://cluster.local/ns/" + ns + "/sa/" + wellknown.SharedProxyServiceAccount
	var latencies []time.Duration
	attempts, exhausted := 0, 0
	failed := map[codes.Code][]int{}
	for i, p := range fleet {
		attempts += p.attempts
		exhausted += p.exhausted
		latencies = append(latencies, p.took)
		switch {
		case p.err != nil:
			failed[status.Code(p.err)] = append(failed[status.Code(p.err)], i)
		case len(p.svid.Certificate.Leaf.URIs) != 1 || p.svid.Certificate.Leaf.URIs[0].String() != want:
			t.Errorf("proxy %d got an SVID for %v, want %s", i, p.svid.Certificate.Leaf.URIs, want)
		}
	}
	slices.Sort(latencies)
	t.Logf("%d proxies bootstrapped in %v: %.0f bootstraps/s (GOMAXPROCS %d, API server and proxies on the same machine); "+
		"%d attempts, %d refused with RESOURCE_EXHAUSTED and retried; time to SVID p50 %v, p99 %v, max %v",
		proxies, elapsed.Round(time.Millisecond), float64(proxies)/elapsed.Seconds(), runtime.GOMAXPROCS(0),
		attempts, exhausted, percentile(latencies, 0.50), percentile(latencies, 0.99), latencies[len(latencies)-1])
	t.Logf("the listener counted (coxswain_discovery_bootstrap_total): %s", bootstrapCounts(t))
	for code, which := range failed {
		t.Errorf("%d proxies ended without an SVID on %s, for example proxy %d after %d attempts: %v",
			len(which), code, which[0], fleet[which[0]].attempts, fleet[which[0]].err)
	}
}

// bootstrap runs the proxy's bootstrap until it gets an SVID or a refusal other than
// RESOURCE_EXHAUSTED, which it retries after the agent's backoff.
func (p *stormProxy) bootstrap(ctx context.Context, cfg client.BootstrapConfig) {
	cfg.TokenPath = p.tokenPath
	source := &net.TCPAddr{IP: p.source}
	cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: source}
		return d.DialContext(ctx, "tcp", addr)
	})}
	began := time.Now()
	ceiling := stormBackoffBase
	for {
		p.attempts++
		p.svid, p.err = client.Bootstrap(ctx, cfg)
		if status.Code(p.err) != codes.ResourceExhausted {
			p.took = time.Since(began)
			return
		}
		p.exhausted++
		wait := min(ceiling+time.Duration(float64(ceiling)*stormBackoffJitter*rand.Float64()), stormBackoffMax) //nolint:gosec // jitter, not a secret
		select {
		case <-ctx.Done():
			p.err = errors.Join(p.err, ctx.Err())
			return
		case <-time.After(wait):
		}
		ceiling = min(2*ceiling, stormBackoffMax)
	}
}

// newStormFleet creates n pods of the shared proxy ServiceAccount in ns and a pod-bound token of
// the discovery audience for each, written where the proxy reads it; each proxy dials from its
// own loopback address, as pods do from their own IPs.
func newStormFleet(t *testing.T, cs kubernetes.Interface, ns string, n int) []*stormProxy {
	t.Helper()
	dir := t.TempDir()
	fleet := make([]*stormProxy, n)
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				p, err := newStormProxy(t.Context(), cs, ns, dir, i)
				if err != nil {
					errs <- err
					continue
				}
				fleet[i] = p
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	return fleet
}

func newStormProxy(ctx context.Context, cs kubernetes.Interface, ns, dir string, i int) (*stormProxy, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("shared-proxy-%d", i)},
		Spec: corev1.PodSpec{
			ServiceAccountName:           wellknown.SharedProxyServiceAccount,
			NodeName:                     "node-a",
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "proxy", Image: "coxswain.dev/coxswain-proxy:test"}},
		},
	}
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %d: %w", i, err)
	}
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:         []string{wellknown.TokenAudience},
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	resp, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, wellknown.SharedProxyServiceAccount, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("request token %d: %w", i, err)
	}
	path := filepath.Join(dir, pod.Name+".token")
	if err := os.WriteFile(path, []byte(resp.Status.Token), 0o600); err != nil {
		return nil, err
	}
	// 127.0.1.1 onwards, 250 addresses per /24: never 127.0.0.1, where the listener is.
	return &stormProxy{tokenPath: path, source: net.IPv4(127, byte(1+i/250), 0, byte(1+i%250))}, nil
}

// startStormController runs one controller replica in namespace, as startController does, but
// with config's rate limits and without logging each of the storm's SVIDs.
func startStormController(t *testing.T, config *rest.Config, namespace string) *controller {
	t.Helper()
	return startControllerWith(t, config, funcr.New(func(string, string) {}, funcr.Options{}), namespace, testSettings(t))
}

// bootstrapCounts returns the bootstrap listener's counts by result and reason, from the
// registry Setup registers with.
func bootstrapCounts(t *testing.T) string {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != "coxswain_discovery_bootstrap_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out = append(out, fmt.Sprintf("%s/%s %.0f", labels["result"], labels["reason"], m.GetCounter().GetValue()))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// percentile returns the q-quantile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/test/e2e"
)

// defaultLBPool is the node agent's load-balancer pool (its --lb-pool flag).
const defaultLBPool = "10.245.0.0/24"

// dedicatedProxyServes creates Gateway A with its route and follows its proxy pod from
// creation: the pod must be seen running but not Ready, then Ready, having obtained an SVID
// with the projected token it mounts, and the Gateway's address must serve the route.
func (s *suite) dedicatedProxyServes(t *testing.T) {
	ctx := t.Context()
	if _, err := s.proxyPod(ctx, gatewayA); err == nil {
		t.Skipf("gateway %s/%s has a proxy already: this scenario must see it start", namespace, gatewayA)
	}
	w, err := s.client.Watch(ctx, &corev1.PodList{}, client.InNamespace(namespace),
		client.MatchingLabels{"app.kubernetes.io/instance": proxyName(gatewayA)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	created := time.Now()
	if err := s.ensureGateway(ctx, gatewayA, hostA); err != nil {
		t.Fatal(err)
	}
	pod, sawNotReady, err := followUntilReady(ctx, w, 2*time.Minute)
	if err != nil {
		t.Fatalf("proxy pod of gateway %s: %v", gatewayA, err)
	}
	t.Logf("Proxy pod %s Ready %s after the Gateway was created", pod.Name, time.Since(created).Round(100*time.Millisecond))
	if !sawNotReady {
		t.Errorf("pod %s was never seen running and not Ready", pod.Name)
	}
	checkProjectedToken(t, pod)
	if err := isReady(pod)(ctx); err != nil {
		t.Error(err)
	}
	h := health(pod)
	if n, err := h.Metric(ctx, "coxswain_proxy_svids_issued_total"); err != nil || n < 1 {
		t.Errorf("coxswain_proxy_svids_issued_total = %v (%v), want at least 1", n, err)
	}
	if exp, err := h.Metric(ctx, "coxswain_proxy_svid_expiry_seconds"); err != nil || exp <= 0 || exp > wellknown.MinSVIDTTL.Seconds() {
		t.Errorf("coxswain_proxy_svid_expiry_seconds = %v (%v), want in (0, %v]: the CoxswainConfig's svidTTL", exp, err, wellknown.MinSVIDTTL.Seconds())
	}
	addr, err := s.waitServing(ctx, gatewayA, hostA, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Gateway %s serves %s at %s, %s after it was created", gatewayA, hostA, addr, time.Since(created).Round(100*time.Millisecond))
	// Not a failure: a replica whose cache lags may refuse the first attempt, and the retry wins.
	if err := s.warningEvent(ctx, wellknown.InstallNamespace, wellknown.EventReasonBootstrapRejected, namespace+"/"+proxyName(gatewayA)+" "); err == nil {
		t.Logf("Note: the proxy of gateway %s was refused at bootstrap at least once before it was served", gatewayA)
	}
}

// followUntilReady reads pod events until a pod is Ready, and reports whether a running pod
// (one with an address) was seen not Ready before.
func followUntilReady(ctx context.Context, w watch.Interface, timeout time.Duration) (*corev1.Pod, bool, error) {
	deadline := time.After(timeout)
	sawNotReady := false
	last := "no pod yet"
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, sawNotReady, fmt.Errorf("watch closed (%s)", last)
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod || ev.Type == watch.Deleted {
				continue
			}
			ready := podReady(pod)
			last = fmt.Sprintf("pod %s phase %s address %q Ready=%s", pod.Name, pod.Status.Phase, pod.Status.PodIP, ready)
			if ready == corev1.ConditionTrue {
				return pod, sawNotReady, nil
			}
			if pod.Status.PodIP != "" {
				sawNotReady = true
			}
		case <-deadline:
			return nil, sawNotReady, fmt.Errorf("not Ready within %s: %s", timeout, last)
		case <-ctx.Done():
			return nil, sawNotReady, ctx.Err()
		}
	}
}

// checkProjectedToken checks that the pod runs as its own ServiceAccount with no automounted
// token and mounts a projected token for the discovery audience at the path the proxy reads.
func checkProjectedToken(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if pod.Spec.ServiceAccountName != proxyName(gatewayA) {
		t.Errorf("pod %s runs as %q, want %q", pod.Name, pod.Spec.ServiceAccountName, proxyName(gatewayA))
	}
	audience := ""
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				audience = src.ServiceAccountToken.Audience
			}
		}
	}
	if audience != wellknown.TokenAudience {
		t.Errorf("pod %s projects a token for audience %q, want %q", pod.Name, audience, wellknown.TokenAudience)
	}
}

// gatewayProgrammed checks Gateway A's status and that kubectl prints the same.
func (s *suite) gatewayProgrammed(t *testing.T) {
	ctx := t.Context()
	if _, err := s.waitServing(ctx, gatewayA, hostA, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	var gw gwapiv1.Gateway
	if err := e2e.Poll(ctx, 30*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
		if err := s.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: gatewayA}, &gw); err != nil {
			return err
		}
		for _, typ := range []string{string(gwapiv1.GatewayConditionAccepted), string(gwapiv1.GatewayConditionProgrammed)} {
			c := condition(gw.Status.Conditions, typ)
			if c == nil || c.Status != "True" || c.ObservedGeneration != gw.Generation {
				return fmt.Errorf("gateway %s conditions %s, want %s True at generation %d", gatewayA, conditions(gw.Status.Conditions), typ, gw.Generation)
			}
		}
		if len(gw.Status.Addresses) == 0 {
			return fmt.Errorf("gateway %s has no address", gatewayA)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	address := gw.Status.Addresses[0]
	if address.Type == nil || *address.Type != gwapiv1.IPAddressType {
		t.Errorf("address %+v, want type IPAddress", address)
	}
	pool := netip.MustParsePrefix(defaultLBPool)
	if p := os.Getenv("COXSWAIN_E2E_LB_POOL"); p != "" {
		pool = netip.MustParsePrefix(p)
	}
	if ip, err := netip.ParseAddr(address.Value); err != nil || !pool.Contains(ip) {
		t.Errorf("gateway address %q is not in the load-balancer pool %s", address.Value, pool)
	}
	var svc corev1.Service
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: proxyName(gatewayA)}, &svc); err != nil {
		t.Fatal(err)
	}
	if ing := svc.Status.LoadBalancer.Ingress; svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(ing) == 0 || ing[0].IP != address.Value {
		t.Errorf("service %s: type %s, ingress %+v; want a LoadBalancer with ingress %s", svc.Name, svc.Spec.Type, ing, address.Value)
	}

	out, err := exec.CommandContext(ctx, "kubectl", "get", "gateway", "-n", namespace, gatewayA).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get gateway: %v: %s", err, out)
	}
	t.Logf("kubectl get gateway -n %s %s:\n%s", namespace, gatewayA, out)
	columns, err := kubectlRow(string(out), gatewayA)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"NAME": gatewayA, "CLASS": className, "ADDRESS": address.Value, "PROGRAMMED": "True"}
	for k, v := range want {
		if columns[k] != v {
			t.Errorf("kubectl get gateway prints %s %q, want %q", k, columns[k], v)
		}
	}
}

// kubectlRow returns the cells of the row of name in kubectl's table output, by column title.
func kubectlRow(out, name string) (map[string]string, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		return nil, fmt.Errorf("kubectl printed no row: %q", out)
	}
	titles := strings.Fields(lines[0])
	for _, l := range lines[1:] {
		cells := strings.Fields(l)
		if len(cells) != len(titles) || cells[0] != name {
			continue
		}
		row := map[string]string{}
		for i, title := range titles {
			row[title] = cells[i]
		}
		return row, nil
	}
	return nil, fmt.Errorf("no row of %s with the %d columns %q in %q", name, len(titles), titles, out)
}

package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/test/e2e"
)

// dedicatedGateway returns a Gateway of the suite's class with one HTTP listener, made
// dedicated by its own parametersRef.
func dedicatedGateway(name string) *gwapiv1.Gateway {
	gw := e2e.Gateway(namespace, name, className, listenerPort)
	gw.Spec.Infrastructure = &gwapiv1.GatewayInfrastructure{ParametersRef: &gwapiv1.LocalParametersReference{
		Group: gwapiv1.Group(v1alpha1.GroupVersion.Group), Kind: "CoxswainGatewayParameters", Name: paramsName,
	}}
	return gw
}

// route returns the HTTPRoute sending host on gateway to the echo backend.
func route(gateway, host string) *gwapiv1.HTTPRoute {
	return e2e.HTTPRoute(e2e.Route{
		Namespace: namespace, Name: gateway, Gateway: gateway, Hostname: host, PathPrefix: "/", Service: echoName,
	})
}

// ensureGateway creates the dedicated Gateway name and its route to host, unless they exist.
func (s *suite) ensureGateway(ctx context.Context, name, host string) error {
	if err := s.ensure(ctx, dedicatedGateway(name)); err != nil {
		return err
	}
	return s.ensure(ctx, route(name, host))
}

// proxyName is the name of a dedicated Gateway's proxy objects.
func proxyName(gateway string) string { return wellknown.DedicatedProxyName(gateway, className) }

// gatewayAddress returns the first address in the Gateway's status.
func (s *suite) gatewayAddress(ctx context.Context, name string) (string, error) {
	var gw gwapiv1.Gateway
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &gw); err != nil {
		return "", err
	}
	if len(gw.Status.Addresses) == 0 {
		return "", fmt.Errorf("gateway %s/%s has no address in its status (conditions %s)", namespace, name, conditions(gw.Status.Conditions))
	}
	return gw.Status.Addresses[0].Value, nil
}

// waitServing creates the Gateway and its route if needed and waits until a request for host to
// the Gateway's address is answered by the echo backend; it returns the address (host:port).
func (s *suite) waitServing(ctx context.Context, name, host string, timeout time.Duration) (string, error) {
	if err := s.ensureGateway(ctx, name, host); err != nil {
		return "", err
	}
	return s.waitGatewayServing(ctx, name, host, timeout)
}

// waitGatewayServing waits until host answers through the Gateway's address and returns it.
func (s *suite) waitGatewayServing(ctx context.Context, name, host string, timeout time.Duration) (string, error) {
	var addr string
	err := e2e.Poll(ctx, timeout, 250*time.Millisecond, func(ctx context.Context) error {
		ip, err := s.gatewayAddress(ctx, name)
		if err != nil {
			return err
		}
		addr = net.JoinHostPort(ip, strconv.Itoa(listenerPort))
		resp, err := e2e.NewClient(addr, true).Get(ctx, host, "/ready")
		if err != nil {
			return err
		}
		return checkEcho(host, "/ready")(resp)
	})
	if err != nil {
		return "", fmt.Errorf("gateway %s/%s never served %s: %w", namespace, name, host, err)
	}
	return addr, nil
}

// checkEcho accepts only the echo backend's answer to GET host+path (any path under it).
func checkEcho(host, path string) func(e2e.Response) error {
	want := "got GET " + host + path
	return func(r e2e.Response) error {
		if r.Code != http.StatusOK || !strings.HasPrefix(string(r.Body), "echo: ") || !strings.Contains(string(r.Body), want) {
			return fmt.Errorf("status %d, body %q; want 200 from the echo backend with %q", r.Code, r.Body, want)
		}
		return nil
	}
}

// startLoad sends requests for host to addr continuously, on a kept-alive connection and on
// fresh ones, and counts every answer but the echo backend's as a failure.
func startLoad(ctx context.Context, addr, host, path string) *e2e.Load {
	clients := []*e2e.Client{e2e.NewClient(addr, false), e2e.NewClient(addr, true)}
	return e2e.StartLoad(ctx, clients, host, path, 5*time.Millisecond, checkEcho(host, path))
}

// waitMoreRequests waits until load has answered n more requests successfully.
func waitMoreRequests(ctx context.Context, load *e2e.Load, n int64, timeout time.Duration) error {
	start, _ := load.Counts()
	return e2e.Poll(ctx, timeout, 20*time.Millisecond, func(context.Context) error {
		ok, failed := load.Counts()
		if ok-start < n {
			return fmt.Errorf("%d of %d requests answered (%d failed so far)", ok-start, n, failed)
		}
		return nil
	})
}

// proxyPod returns the one running pod of a dedicated Gateway's proxy.
func (s *suite) proxyPod(ctx context.Context, gateway string) (*corev1.Pod, error) {
	pods, err := s.pods(ctx, client.InNamespace(namespace), client.MatchingLabels{"app.kubernetes.io/instance": proxyName(gateway)})
	if err != nil {
		return nil, err
	}
	if len(pods) != 1 {
		return nil, fmt.Errorf("%d running proxy pods of gateway %s/%s, want 1", len(pods), namespace, gateway)
	}
	return &pods[0], nil
}

// pods lists the pods that have an address and are not being deleted.
func (s *suite) pods(ctx context.Context, opts ...client.ListOption) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := s.client.List(ctx, &list, opts...); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			out = append(out, p)
		}
	}
	return out, nil
}

// podReady returns the status of the pod's Ready condition.
func podReady(p *corev1.Pod) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// health returns the reader of a proxy pod's health endpoint: the container port named
// "health", else 8081.
func health(p *corev1.Pod) *e2e.Health {
	port := int32(8081)
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "health" {
				port = cp.ContainerPort
			}
		}
	}
	return e2e.NewHealth(net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))))
}

// readyState returns nil when the proxy pod's /readyz answers code with a body starting with
// state (NotReady, Degraded, Ready).
func readyState(p *corev1.Pod, code int, state string) func(context.Context) error {
	h := health(p)
	return func(ctx context.Context) error {
		got, body, err := h.Readyz(ctx)
		if err != nil {
			return err
		}
		if got != code || !strings.HasPrefix(body, state+":") && body != state {
			return fmt.Errorf("pod %s/%s readyz %d %q, want %d %s", p.Namespace, p.Name, got, body, code, state)
		}
		return nil
	}
}

var (
	isReady    = func(p *corev1.Pod) func(context.Context) error { return readyState(p, http.StatusOK, "Ready") }
	isDegraded = func(p *corev1.Pod) func(context.Context) error { return readyState(p, http.StatusOK, "Degraded") }
	isNotReady = func(p *corev1.Pod) func(context.Context) error {
		return readyState(p, http.StatusServiceUnavailable, "NotReady")
	}
)

// controllerMetric returns the sum of the samples of name whose labels include want, over every
// running controller pod's metrics endpoint (HTTPS on port 8443, with the scraper's token).
func (s *suite) controllerMetric(ctx context.Context, name string, want map[string]string) (float64, error) {
	pods, err := s.pods(ctx, client.InNamespace(wellknown.InstallNamespace), controllerLabels)
	if err != nil {
		return 0, err
	}
	if len(pods) == 0 {
		return 0, fmt.Errorf("no running controller pod")
	}
	token, err := s.metricsToken(ctx)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, p := range pods {
		body, err := controllerMetrics(ctx, &p, token)
		if err != nil {
			return 0, fmt.Errorf("metrics of controller pod %s: %w", p.Name, err)
		}
		sum += metricSum(body, name, want)
	}
	return sum, nil
}

// metricSum adds the values of the samples of name, in the Prometheus text format, whose labels
// include every pair of want.
func metricSum(body []byte, name string, want map[string]string) float64 {
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels, value := "", strings.TrimSpace(rest)
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			labels, value = rest[1:end], strings.TrimSpace(rest[end+1:])
		}
		if !hasLabels(labels, want) {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Fields(value)[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

func hasLabels(labels string, want map[string]string) bool {
	for k, v := range want {
		if !strings.Contains(labels, k+"="+strconv.Quote(v)) {
			return false
		}
	}
	return true
}

// conditions formats conditions for a failure message.
func conditions(cs []metav1.Condition) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		parts = append(parts, c.Type+"="+string(c.Status)+" "+c.Reason)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// condition returns the condition of type typ, nil when absent.
func condition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}

// warningEvent returns nil when a Warning event of reason in namespace ns has a message
// containing every one of substrings.
func (s *suite) warningEvent(ctx context.Context, ns, reason string, substrings ...string) error {
	var events corev1.EventList
	if err := s.client.List(ctx, &events, client.InNamespace(ns)); err != nil {
		return err
	}
	var seen []string
	for _, e := range events.Items {
		if e.Reason != reason {
			continue
		}
		matches := e.Type == corev1.EventTypeWarning
		for _, sub := range substrings {
			matches = matches && strings.Contains(e.Message, sub)
		}
		if matches {
			return nil
		}
		seen = append(seen, e.Type+" "+e.Message)
	}
	return fmt.Errorf("%s events in %s: %q, want a Warning naming %q", reason, ns, seen, substrings)
}

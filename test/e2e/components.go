package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// The suite's fixed ports. They sit outside the namespace's ephemeral range, so nothing else
// takes them and a restarted process gets its port back.
const (
	// OperatorProbePort serves the operator's /healthz and /readyz.
	OperatorProbePort = 18081
	// OperatorPprofPort serves the operator's runtime profiles when a benchmark asks for them.
	OperatorPprofPort = 18082
	// OperatorMetricsPort serves the operator's metrics when a benchmark reads them.
	OperatorMetricsPort = 18083
	// GatewayPort is the port of the shared pool Gateway's listener. The shared proxy serves it
	// on the Gateway's internal port, which the Gateway's Service maps it to (see
	// suite.gatewayAddr).
	GatewayPort = 8080
)

// discoveryServerName is the DNS name in the operator's serving certificate that proxies
// verify, as in a cluster where they dial the discovery Service.
const discoveryServerName = wellknown.DiscoveryServiceName + "." + wellknown.InstallNamespace + ".svc"

// OperatorOptions are what differs between the suite's operator runs.
type OperatorOptions struct {
	// Kubeconfig is the path of the kubeconfig the operator uses.
	Kubeconfig string
	// SVIDTTL is the lifetime of the SVIDs it issues.
	SVIDTTL time.Duration
	// CASecret names the CA Secret; wellknown.CASecretName when empty.
	CASecret string
}

// OperatorArgs are the operator's flags: every discovery setting given explicitly, no leader
// election, no metrics listener.
func OperatorArgs(o OperatorOptions) []string {
	caSecret := o.CASecret
	if caSecret == "" {
		caSecret = wellknown.CASecretName
	}
	return []string{
		"--leader-elect=false",
		"--namespace=" + wellknown.InstallNamespace,
		"--config-name=coxswain",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=" + loopback(OperatorProbePort),
		"--discovery-ca-mode=" + string(wellknown.CAModeAuto),
		"--discovery-ca-secret=" + caSecret,
		"--discovery-trust-domain=" + wellknown.DefaultTrustDomain,
		"--discovery-svid-ttl=" + o.SVIDTTL.String(),
		"--discovery-port=" + strconv.Itoa(wellknown.StreamPort),
		"--discovery-bootstrap-port=" + strconv.Itoa(wellknown.BootstrapPort),
	}
}

// ProxyOptions are what differs between the suite's proxies.
type ProxyOptions struct {
	NodeID          string
	TokenPath       string
	TrustBundlePath string
	HealthPort      int
	// GatewayNamespace and GatewayName ask for a dedicated Gateway's scope; empty for the
	// shared pool.
	GatewayNamespace, GatewayName string
	// PortOffset is added to every Gateway listener port, so two proxies of one scope can
	// run side by side in the namespace.
	PortOffset int
}

// HealthAddr returns host:port of the proxy's health endpoint.
func (o ProxyOptions) HealthAddr() string { return loopback(o.HealthPort) }

// ProxyArgs are the proxy's flags for o, dialling the operator on the loopback.
func ProxyArgs(o ProxyOptions) []string {
	args := []string{
		"--discovery-endpoint=" + loopback(wellknown.StreamPort),
		"--bootstrap-endpoint=" + loopback(wellknown.BootstrapPort),
		"--discovery-server-name=" + discoveryServerName,
		"--token-path=" + o.TokenPath,
		"--trust-bundle-path=" + o.TrustBundlePath,
		"--health-address=" + o.HealthAddr(),
		"--node-id=" + o.NodeID,
		"--shutdown-timeout=2s",
		// No load balancer sends these proxies traffic by endpoints: the suite's stops (within
		// 5 s) need no drain period.
		"--drain-period=0",
		// Thousands of access log lines would bury the agent's messages in a failed test's log.
		"--access-log=false",
		// Several proxies share the loopback here, so the default 127.0.0.1:9901 would collide.
		"--admin-address=127.0.0.1:0",
	}
	if o.GatewayName != "" {
		args = append(args, "--gateway-namespace="+o.GatewayNamespace, "--gateway-name="+o.GatewayName)
	}
	if o.PortOffset != 0 {
		args = append(args, "--port-offset="+strconv.Itoa(o.PortOffset))
	}
	return args
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// Health reads a proxy's health endpoint at addr.
type Health struct {
	addr string
	http *http.Client
}

// NewHealth returns a reader of the health endpoint at addr.
func NewHealth(addr string) *Health {
	return &Health{addr: addr, http: &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 2 * time.Second}}
}

// Readyz returns the status code and body of /readyz.
func (h *Health) Readyz(ctx context.Context) (int, string, error) {
	code, body, err := h.get(ctx, "/readyz")
	return code, strings.TrimSpace(string(body)), err
}

// Metric returns the value of the unlabelled sample name on /metrics.
func (h *Health) Metric(ctx context.Context, name string) (float64, error) {
	code, body, err := h.get(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics of %s: status %d", h.addr, code)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		value, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", name, err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("metric %s not on /metrics of %s", name, h.addr)
}

func (h *Health) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.addr+path, http.NoBody)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s of %s: %w", path, h.addr, err)
	}
	resp, err := h.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s of %s: %w", path, h.addr, err)
	}
	defer resp.Body.Close() //nolint:errcheck // read to the end below
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s of %s: %w", path, h.addr, err)
	}
	return resp.StatusCode, body, nil
}

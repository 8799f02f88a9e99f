package pod

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

type probeKind string

const (
	startup   probeKind = "startup"
	readiness probeKind = "readiness"
	liveness  probeKind = "liveness"
)

// probe runs p against the running container: readiness results set the container's ready
// flag until ctx ends; a liveness or startup failure past its threshold kills the process so
// the supervisor restarts it. A startup probe returns true once it passed (at once without a
// probe); the others return when ctx ends. The agent dials the pod's address from the node's
// network namespace, as a kubelet dials from the host's.
func (c *container) probe(ctx context.Context, p *corev1.Probe, kind probeKind) bool {
	if p == nil {
		return true
	}
	period := seconds(p.PeriodSeconds, 10)
	if !sleep(ctx, seconds(p.InitialDelaySeconds, 0)) {
		return false
	}
	success, failure := int(max(p.SuccessThreshold, 1)), int(max(p.FailureThreshold, 1))
	if p.FailureThreshold == 0 {
		failure = 3
	}
	passed, failed := 0, 0
	for {
		err := c.check(ctx, p)
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			passed, failed = passed+1, 0
		} else {
			passed, failed = 0, failed+1
			c.log.V(1).Info("Probe failed", "probe", string(kind), "error", err.Error())
		}
		switch {
		case kind == startup && passed >= success:
			return true
		case kind == readiness && passed >= success:
			c.setReady(true)
		case kind == readiness && failed >= failure:
			c.setReady(false)
		case kind != readiness && failed >= failure:
			c.log.Info("Probe failed, restarting container", "probe", string(kind), "error", err.Error())
			c.kill(gracePeriodOf(c))
			return false
		}
		if !sleep(ctx, period) {
			return false
		}
	}
}

func gracePeriodOf(c *container) time.Duration {
	pod, _ := c.w.latest()
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

func (c *container) setStarted() {
	c.mu.Lock()
	changed := !c.started && c.pid != 0
	if changed {
		c.started = true
		c.ready = c.spec.ReadinessProbe == nil
	}
	c.mu.Unlock()
	if changed {
		c.w.poke()
	}
}

func (c *container) setReady(ready bool) {
	c.mu.Lock()
	changed := c.ready != ready && c.pid != 0
	if changed {
		c.ready = ready
	}
	c.mu.Unlock()
	if changed {
		c.w.poke()
	}
}

func seconds(n int32, def int) time.Duration {
	if n <= 0 {
		return time.Duration(def) * time.Second
	}
	return time.Duration(n) * time.Second
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// check runs one probe. gRPC probes are not served yet and always pass.
func (c *container) check(ctx context.Context, p *corev1.Probe) error {
	ctx, cancel := context.WithTimeout(ctx, seconds(p.TimeoutSeconds, 1))
	defer cancel()
	c.w.mu.Lock()
	host := ""
	if c.w.sb != nil {
		host = c.w.sb.IP.String()
	}
	c.w.mu.Unlock()
	switch {
	case p.HTTPGet != nil:
		return c.checkHTTP(ctx, p.HTTPGet, host)
	case p.TCPSocket != nil:
		port, err := c.port(p.TCPSocket.Port)
		if err != nil {
			return err
		}
		if p.TCPSocket.Host != "" {
			host = p.TCPSocket.Host
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("tcp probe: %w", err)
		}
		return conn.Close()
	case p.Exec != nil:
		return c.checkExec(ctx, p.Exec.Command)
	}
	return nil
}

// probeTransport does not verify certificates, as the kubelet's probes do not.
var probeTransport = &http.Transport{
	TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes check liveness, not identity
	DisableKeepAlives: true,
}

func (c *container) checkHTTP(ctx context.Context, g *corev1.HTTPGetAction, host string) error {
	port, err := c.port(g.Port)
	if err != nil {
		return err
	}
	if g.Host != "" {
		host = g.Host
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: g.Path}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), http.NoBody)
	if err != nil {
		return fmt.Errorf("http probe: %w", err)
	}
	req.Header.Set("User-Agent", "coxswain-node-agent/probe")
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := probeTransport.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("http probe: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("http probe: status %d", resp.StatusCode)
	}
	return nil
}

// port resolves a probe's port, by number or by the name of a container port.
func (c *container) port(p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.spec.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("probe: container has no port named %s", p.StrVal)
}

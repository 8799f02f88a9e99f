package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"coxswain.dev/coxswain/discovery/wellknown"
)

const (
	// outageLength is how long the operator stays down.
	outageLength = 3 * time.Second
	// latePortOffset moves the listeners of the proxy started during the outage off the
	// shared proxy's.
	latePortOffset = 1000
)

// requestPause is the pause between two requests of one load worker.
const requestPause = 5 * time.Millisecond

// echoLoad sends requests for the echo route continuously over a kept-alive connection and
// over fresh connections, and counts as failures any answer but the echo backend's with the
// header the route adds.
func (s *suite) echoLoad(ctx context.Context) *Load {
	clients := []*Client{NewClient(loopback(s.gatewayPort), false), NewClient(loopback(s.gatewayPort), true)}
	return StartLoad(ctx, clients, echoHost, echoPath, requestPause, checkEcho(serviceName, "routed"))
}

func checkEcho(backend, headerValue string) func(Response) error {
	return func(r Response) error {
		e, err := r.Echo()
		if err != nil {
			return err
		}
		if e.Backend != backend || e.Header.Get(addedHeader) != headerValue {
			return fmt.Errorf("answer from %q with %s %q, want %q with %q", e.Backend, addedHeader, e.Header.Get(addedHeader), backend, headerValue)
		}
		return nil
	}
}

// waitMoreRequests waits until load has answered n more requests successfully.
func waitMoreRequests(ctx context.Context, load *Load, n int64, timeout time.Duration) error {
	start, _ := load.Counts()
	return Poll(ctx, timeout, 20*time.Millisecond, func(context.Context) error {
		ok, failed := load.Counts()
		if ok-start < n {
			return fmt.Errorf("%d of %d requests answered (%d failed so far)", ok-start, n, failed)
		}
		return nil
	})
}

// degraded returns nil while the proxy's /readyz says 200 Degraded.
func (p *proxy) degraded(ctx context.Context) error {
	code, body, err := p.health.Readyz(ctx)
	if err != nil {
		return err
	}
	if code != http.StatusOK || !strings.HasPrefix(body, "Degraded:") {
		return fmt.Errorf("%s readyz %d %q, want 200 Degraded", p.Name, code, body)
	}
	return nil
}

// trafficSurvivesOperatorOutage kills the operator under load: the proxy must turn Degraded
// and keep serving its last snapshot without failing a request, then turn Ready again when a
// new operator comes up, and serve a route created after the restart. A proxy started during
// the outage stays NotReady until the operator is back, then serves.
func (s *suite) trafficSurvivesOperatorOutage(t *testing.T) {
	ctx := t.Context()
	load := s.echoLoad(ctx)
	defer load.Stop() //nolint:errcheck // stopped and checked below; this covers a failure before it
	if err := waitMoreRequests(ctx, load, 50, 10*time.Second); err != nil {
		t.Fatalf("load before the outage: %v", err)
	}

	s.operator.Kill()
	killed := time.Now()
	if err := s.shared.waitState(ctx, 20*time.Second, "Degraded"); err != nil {
		t.Fatalf("proxy did not turn Degraded after the operator was killed: %v", err)
	}
	t.Logf("Proxy Degraded %s after SIGKILL of the operator", time.Since(killed).Round(time.Millisecond))
	// Long enough for several reconnection attempts to fail.
	if err := Hold(ctx, outageLength, 100*time.Millisecond, s.shared.degraded); err != nil {
		t.Fatalf("during the outage: %v", err)
	}
	if err := waitMoreRequests(ctx, load, 200, 20*time.Second); err != nil {
		t.Fatalf("load during the outage: %v", err)
	}
	// A proxy that starts while the operator is down has nothing to serve until it is back.
	newcomer := s.startProxy(t, ProxyOptions{
		NodeID: "late", TokenPath: s.shared.opts.TokenPath, TrustBundlePath: s.bundle,
		HealthPort: lateHealthPort, PortOffset: latePortOffset,
	})
	defer stopQuietly(newcomer)
	if err := Poll(ctx, 10*time.Second, 50*time.Millisecond, newcomer.notReady); err != nil {
		t.Fatalf("proxy started during the outage: %v", err)
	}
	if err := Hold(ctx, time.Second, 100*time.Millisecond, newcomer.notReady); err != nil {
		t.Errorf("proxy started during the outage: %v", err)
	}

	s.operator = s.startOperator(t, wellknown.DefaultSVIDTTL)
	restarted := time.Now()
	if err := s.shared.waitState(ctx, 60*time.Second, "Ready"); err != nil {
		t.Fatalf("proxy did not turn Ready after the operator restarted: %v", err)
	}
	t.Logf("Proxy Ready %s after the operator restarted (outage %s)", time.Since(restarted).Round(time.Millisecond),
		time.Since(killed).Round(time.Millisecond))
	if err := newcomer.waitState(ctx, 60*time.Second, "Ready"); err != nil {
		t.Fatalf("proxy started during the outage did not turn Ready after the restart: %v", err)
	}
	newcomerClient := NewClient(loopback(s.gatewayPort+latePortOffset), false)
	defer newcomerClient.CloseIdle()
	if err := Poll(ctx, 10*time.Second, 20*time.Millisecond, func(ctx context.Context) error {
		resp, err := newcomerClient.Get(ctx, echoHost, echoPath)
		if err != nil {
			return err
		}
		return checkEcho(serviceName, "routed")(resp)
	}); err != nil {
		t.Fatalf("proxy started during the outage does not serve the echo route: %v", err)
	}
	t.Logf("Proxy started during the outage Ready and serving %s after the restart", time.Since(restarted).Round(time.Millisecond))

	late := Route{
		Namespace: appNamespace, Name: "late", Gateway: gatewayName, Hostname: "late.example.com",
		PathPrefix: "/", AddHeader: addedHeader, AddValue: "late", Service: serviceName,
	}
	created := time.Now()
	if err := s.cluster.Client.Create(ctx, HTTPRoute(late)); err != nil {
		t.Fatal(err)
	}
	c := NewClient(loopback(s.gatewayPort), false)
	defer c.CloseIdle()
	if err := Poll(ctx, 30*time.Second, 5*time.Millisecond, func(ctx context.Context) error {
		resp, err := c.Get(ctx, late.Hostname, "/after-restart")
		if err != nil {
			return err
		}
		return checkEcho(serviceName, "late")(resp)
	}); err != nil {
		t.Fatalf("route created after the restart never served: %v", err)
	}
	t.Logf("Route created after the restart served %s after Create", time.Since(created).Round(time.Millisecond))

	ok, failed, failures := load.Stop()
	t.Logf("Requests through the outage: %d answered, %d failed", ok, failed)
	if failed > 0 {
		t.Errorf("%d requests failed through the outage; the first:\n%v", failed, failures)
	}
}

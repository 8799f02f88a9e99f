package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// The routing objects the traffic scenarios share.
const (
	appNamespace = "default"
	className    = "coxswain"
	gatewayName  = "web"
	serviceName  = "echo"
	echoHost     = "echo.example.com"
	echoPath     = "/echo/hello"
	addedHeader  = "X-Coxswain-E2e"
)

// echoRoute is the route of the scenario: echo.example.com/echo to the echo backend, with a
// header added on the way.
var echoRoute = Route{
	Namespace: appNamespace, Name: "echo", Gateway: gatewayName, Hostname: echoHost,
	PathPrefix: "/echo", AddHeader: addedHeader, AddValue: "routed", Service: serviceName,
}

// routeIsServed sets up a Gateway and a backend Service, then times a new HTTPRoute from its
// creation to the first answer from the backend, and checks the answer, the 404s of what the
// route does not match, and the status the operator wrote.
func (s *suite) routeIsServed(t *testing.T) {
	ctx := t.Context()
	backend, err := StartBackend(ctx, serviceName)
	if err != nil {
		t.Fatal(err)
	}
	s.backend = backend
	s.t.Cleanup(func() { _ = backend.Close() })
	svc, slice := BackendService(appNamespace, serviceName, backend)
	for _, obj := range []client.Object{GatewayClass(className), Gateway(appNamespace, gatewayName, className, GatewayPort), svc, slice} {
		if err := s.cluster.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.waitGatewayProgrammed(ctx); err != nil {
		t.Fatalf("Gateway never became Programmed: %v", err)
	}
	port, err := s.sharedPort(ctx)
	if err != nil {
		t.Fatalf("the Gateway's Service on the shared pool: %v", err)
	}
	s.gatewayPort = port
	c := NewClient(loopback(s.gatewayPort), false)
	defer c.CloseIdle()
	if err := Poll(ctx, 20*time.Second, 20*time.Millisecond, func(ctx context.Context) error {
		_, err := c.Get(ctx, echoHost, echoPath)
		return err
	}); err != nil {
		t.Fatalf("the shared proxy never opened the Gateway's internal port %d: %v", s.gatewayPort, err)
	}

	created := time.Now()
	if err := s.cluster.Client.Create(ctx, HTTPRoute(echoRoute)); err != nil {
		t.Fatal(err)
	}
	var echo Echo
	err = Poll(ctx, 30*time.Second, 5*time.Millisecond, func(ctx context.Context) error {
		resp, err := c.Get(ctx, echoHost, echoPath)
		if err != nil {
			return err
		}
		echo, err = resp.Echo()
		return err
	})
	if err != nil {
		t.Fatalf("route never served: %v", err)
	}
	t.Logf("Route propagation: %s from Create(HTTPRoute) to the first 200", time.Since(created).Round(time.Millisecond))

	if echo.Backend != serviceName || echo.Path != echoPath {
		t.Errorf("backend %q saw path %q, want %q and %q", echo.Backend, echo.Path, serviceName, echoPath)
	}
	if got := echo.Header.Get(addedHeader); got != "routed" {
		t.Errorf("backend saw %s: %q, want %q (headers %v)", addedHeader, got, "routed", echo.Header)
	}
	for _, miss := range []struct{ host, path string }{{"unknown.example.com", echoPath}, {echoHost, "/elsewhere"}} {
		resp, err := c.Get(ctx, miss.host, miss.path)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Code != http.StatusNotFound {
			t.Errorf("GET %s%s: status %d, want 404", miss.host, miss.path, resp.Code)
		}
	}
	if err := s.waitRouteAccepted(ctx, echoRoute.Name); err != nil {
		t.Errorf("HTTPRoute status: %v", err)
	}
	if err := s.waitAttachedRoutes(ctx, 1); err != nil {
		t.Errorf("Gateway listener status: %v", err)
	}
}

// waitGatewayProgrammed waits for the GatewayClass to be Accepted and the Gateway Accepted and
// Programmed.
func (s *suite) waitGatewayProgrammed(ctx context.Context) error {
	return Poll(ctx, 20*time.Second, 50*time.Millisecond, func(ctx context.Context) error {
		var class gwapiv1.GatewayClass
		if err := s.cluster.Client.Get(ctx, types.NamespacedName{Name: className}, &class); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(class.Status.Conditions, string(gwapiv1.GatewayClassConditionStatusAccepted)) {
			return fmt.Errorf("GatewayClass conditions %s", conditionsString(class.Status.Conditions))
		}
		var gw gwapiv1.Gateway
		if err := s.cluster.Client.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: gatewayName}, &gw); err != nil {
			return err
		}
		return conditionsTrue(gw.Status.Conditions, string(gwapiv1.GatewayConditionAccepted), string(gwapiv1.GatewayConditionProgrammed))
	})
}

// sharedPort returns the internal port the shared pool serves the Gateway's listener on: the
// target port of GatewayPort in the Gateway's Service, which the operator made in its namespace.
func (s *suite) sharedPort(ctx context.Context) (int, error) {
	key := types.NamespacedName{Namespace: wellknown.InstallNamespace, Name: wellknown.SharedGatewayServiceName(appNamespace, gatewayName)}
	var svc corev1.Service
	if err := s.cluster.Client.Get(ctx, key, &svc); err != nil {
		return 0, err
	}
	for _, p := range svc.Spec.Ports {
		if p.Port == GatewayPort {
			if t := p.TargetPort.IntValue(); t >= wellknown.SharedPoolFirstPort && t <= wellknown.SharedPoolLastPort {
				return t, nil
			}
			return 0, fmt.Errorf("Service %s maps port %d to %s, not an internal port", key, GatewayPort, p.TargetPort.String())
		}
	}
	return 0, fmt.Errorf("Service %s has no port %d: %+v", key, GatewayPort, svc.Spec.Ports)
}

// waitRouteAccepted waits for the route's parent status from our controller to say Accepted
// and ResolvedRefs.
func (s *suite) waitRouteAccepted(ctx context.Context, name string) error {
	return Poll(ctx, 10*time.Second, 50*time.Millisecond, func(ctx context.Context) error {
		var route gwapiv1.HTTPRoute
		if err := s.cluster.Client.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: name}, &route); err != nil {
			return err
		}
		for _, p := range route.Status.Parents {
			if p.ControllerName == wellknown.GatewayControllerName && string(p.ParentRef.Name) == gatewayName {
				return conditionsTrue(p.Conditions, string(gwapiv1.RouteConditionAccepted), string(gwapiv1.RouteConditionResolvedRefs))
			}
		}
		return errors.New("no parent status from " + wellknown.GatewayControllerName)
	})
}

// waitAttachedRoutes waits for the Gateway's listener to count n attached routes.
func (s *suite) waitAttachedRoutes(ctx context.Context, n int32) error {
	return Poll(ctx, 10*time.Second, 50*time.Millisecond, func(ctx context.Context) error {
		var gw gwapiv1.Gateway
		if err := s.cluster.Client.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: gatewayName}, &gw); err != nil {
			return err
		}
		if len(gw.Status.Listeners) != 1 || gw.Status.Listeners[0].AttachedRoutes != n {
			return fmt.Errorf("listener status %+v, want one listener with %d attached routes", gw.Status.Listeners, n)
		}
		return nil
	})
}

func conditionsTrue(conds []metav1.Condition, types ...string) error {
	for _, typ := range types {
		if !meta.IsStatusConditionTrue(conds, typ) {
			return fmt.Errorf("want %s True, conditions %s", typ, conditionsString(conds))
		}
	}
	return nil
}

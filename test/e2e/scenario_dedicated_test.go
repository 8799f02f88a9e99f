package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// The dedicated Gateway of the scenario and its listener port.
const (
	privateGateway = "private"
	privatePort    = 8090
	privateHost    = "private.example.com"
)

// dedicatedGatewayIsServedToItsOwnProxy gives Gateway default/private its own proxy through
// CoxswainGatewayParameters (GEP-1762) and checks the scope binding with real identities: the
// proxy of ServiceAccount default/private-coxswain gets the Gateway's snapshot and serves its
// route, while that identity asking for the shared pool or another Gateway, and the shared
// pool's identity asking for this Gateway, are refused on the stream.
func (s *suite) dedicatedGatewayIsServedToItsOwnProxy(t *testing.T) {
	ctx := t.Context()
	params := &v1alpha1.CoxswainGatewayParameters{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "dedicated"},
		Spec:       v1alpha1.CoxswainGatewayParametersSpec{Replicas: ptr.To[int32](1)},
	}
	gw := Gateway(appNamespace, privateGateway, className, privatePort)
	gw.Spec.Infrastructure = &gwapiv1.GatewayInfrastructure{ParametersRef: &gwapiv1.LocalParametersReference{
		Group: gwapiv1.Group(v1alpha1.GroupVersion.Group), Kind: "CoxswainGatewayParameters", Name: params.Name,
	}}
	route := HTTPRoute(Route{
		Namespace: appNamespace, Name: privateGateway, Gateway: privateGateway, Hostname: privateHost,
		PathPrefix: "/", AddHeader: addedHeader, AddValue: "private", Service: serviceName,
	})
	for _, obj := range []client.Object{params, gw, route} {
		if err := s.cluster.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	dedicatedSA := wellknown.DedicatedProxyName(privateGateway, className)
	dedicatedToken := s.namespacedTokenFile(ctx, t, appNamespace, dedicatedSA)

	own := s.startProxy(t, ProxyOptions{
		NodeID: "private", TokenPath: dedicatedToken, TrustBundlePath: s.bundle, HealthPort: privateHealthPort,
		GatewayNamespace: appNamespace, GatewayName: privateGateway,
	})
	defer stopQuietly(own)
	if err := own.waitState(ctx, 30*time.Second, "Ready"); err != nil {
		t.Fatalf("dedicated proxy never became Ready: %v", err)
	}
	c := NewClient(loopback(privatePort), false)
	defer c.CloseIdle()
	if err := Poll(ctx, 20*time.Second, 20*time.Millisecond, func(ctx context.Context) error {
		resp, err := c.Get(ctx, privateHost, "/")
		if err != nil {
			return err
		}
		return checkEcho(serviceName, "private")(resp)
	}); err != nil {
		t.Fatalf("dedicated Gateway's route not served: %v", err)
	}
	// Neither Gateway's routes leak into the other's listener.
	shared := NewClient(loopback(s.gatewayPort), false)
	defer shared.CloseIdle()
	for _, miss := range []struct {
		c          *Client
		port       int
		host, path string
	}{{shared, s.gatewayPort, privateHost, "/"}, {c, privatePort, echoHost, echoPath}} {
		resp, err := miss.c.Get(ctx, miss.host, miss.path)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Code != http.StatusNotFound {
			t.Errorf("GET %s%s on port %d: status %d, want 404", miss.host, miss.path, miss.port, resp.Code)
		}
	}

	impostors := []ProxyOptions{
		{NodeID: "private-as-shared", TokenPath: dedicatedToken, HealthPort: impostorHealthPorts[0]},
		{NodeID: "private-as-web", TokenPath: dedicatedToken, HealthPort: impostorHealthPorts[1], GatewayNamespace: appNamespace, GatewayName: gatewayName},
		{NodeID: "shared-as-private", TokenPath: s.shared.opts.TokenPath, HealthPort: impostorHealthPorts[2], GatewayNamespace: appNamespace, GatewayName: privateGateway},
	}
	procs := make([]*proxy, 0, len(impostors))
	for _, o := range impostors {
		o.TrustBundlePath = s.bundle
		procs = append(procs, s.startProxy(t, o))
	}
	defer stopQuietly(procs...)
	for _, p := range procs {
		if err := Poll(ctx, 20*time.Second, 100*time.Millisecond, func(context.Context) error {
			if !p.LogContains("code = PermissionDenied") {
				return fmt.Errorf("%s has not been refused with PermissionDenied", p.Name)
			}
			return nil
		}); err != nil {
			t.Error(err)
			continue
		}
		if err := Hold(ctx, time.Second, 100*time.Millisecond, p.notReady); err != nil {
			t.Error(err)
		}
		code, body, _ := p.health.Readyz(ctx)
		t.Logf("%s: readyz %d %q", p.Name, code, body)
	}
}

// namespacedTokenFile writes a discovery token of ServiceAccount namespace/sa to a file, once
// the operator has provisioned that ServiceAccount: only the one it created for the Gateway
// (the Gateway its controller) receives the Gateway's identity.
func (s *suite) namespacedTokenFile(ctx context.Context, t *testing.T, namespace, sa string) string {
	t.Helper()
	if err := Poll(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) error {
		var obj corev1.ServiceAccount
		if err := s.cluster.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: sa}, &obj); err != nil {
			return err
		}
		if metav1.GetControllerOf(&obj) == nil {
			return fmt.Errorf("ServiceAccount %s/%s has no controller yet", namespace, sa)
		}
		return nil
	}); err != nil {
		t.Fatalf("the operator never provisioned ServiceAccount %s/%s: %v", namespace, sa, err)
	}
	token, err := s.cluster.ServiceAccountToken(ctx, namespace, sa)
	if err != nil {
		t.Fatal(err)
	}
	return s.writeFile(t, namespace+"-"+sa+".token", []byte(token))
}

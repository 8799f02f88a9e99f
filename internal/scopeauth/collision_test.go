package scopeauth

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// dedicated renders a GatewayClass name whose Gateways all get a dedicated proxy.
func dedicatedClass(name string) string {
	return fmt.Sprintf(`---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: %s}
spec:
  controllerName: coxswain.dev/gateway-controller
  parametersRef: {group: gateway.coxswain.dev, kind: CoxswainGatewayParameters, name: big, namespace: infra}
`, name)
}

func gateway(namespace, name, class string) string {
	return fmt.Sprintf(`---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: %s, namespace: %s}
spec:
  gatewayClassName: %s
  listeners: [{name: http, port: 80, protocol: HTTP}]
`, name, namespace, class)
}

// Tests that no Gateway gets a dedicated identity that another Gateway also maps to ("a" of
// class "b-c" and "a-b" of class "c" are both "a-b-c": the older Gateway, then the first by
// name, keeps it, as the provisioner does), nor one named like the shared pool's or the
// controller's ServiceAccount, in any namespace; the same names elsewhere are unaffected.
func TestAuthorityRefusesCollidingAndReservedIdentities(t *testing.T) {
	t.Parallel()
	ns := wellknown.InstallNamespace
	yaml := world + `---
apiVersion: gateway.coxswain.dev/v1alpha1
kind: CoxswainGatewayParameters
metadata: {name: big, namespace: infra}
` + dedicatedClass("b-c") + dedicatedClass("c") + dedicatedClass("proxy") + dedicatedClass("controller") +
		gateway("team", "a", "b-c") + gateway("team", "a-b", "c") + gateway("other", "a", "b-c") +
		gateway(ns, "coxswain-shared", "proxy") + gateway(ns, "coxswain", "controller") +
		gateway("team", "coxswain-shared", "proxy")
	a := New(
		ServiceAccount{Namespace: ns, Name: wellknown.SharedProxyServiceAccount},
		ServiceAccount{Namespace: ns, Name: wellknown.ControllerServiceAccount},
	)
	var ids []ServiceAccount
	a.OnDedicatedIdentities(func(set []ServiceAccount) { ids = set })
	a.Update(build(t, yaml))

	for _, gw := range [][2]string{{"team", "a-b"}, {ns, "coxswain-shared"}, {ns, "coxswain"}, {"team", "coxswain-shared"}} {
		if sa, err := a.ExpectedServiceAccount(gw[0], gw[1]); !errors.Is(err, stream.ErrUnknownGateway) {
			t.Errorf("%s/%s: got %q, %v; want ErrUnknownGateway", gw[0], gw[1], sa, err)
		}
	}
	for _, gw := range [][3]string{{"team", "a", "a-b-c"}, {"other", "a", "a-b-c"}, {"prod", "web", "web-coxswain"}} {
		if sa, err := a.ExpectedServiceAccount(gw[0], gw[1]); err != nil || sa != gw[2] {
			t.Errorf("%s/%s: got %q, %v; want %s", gw[0], gw[1], sa, err, gw[2])
		}
	}
	want := []ServiceAccount{
		{Namespace: "other", Name: "a-b-c"},
		{Namespace: "prod", Name: "api-dedicated"},
		{Namespace: "prod", Name: "web-coxswain"},
		{Namespace: "team", Name: "a-b-c"},
	}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("dedicated identities (-want +got):\n%s", diff)
	}
}

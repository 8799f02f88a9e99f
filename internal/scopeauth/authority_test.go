package scopeauth

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/state"
)

const world = `
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: coxswain}
spec: {controllerName: coxswain.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: dedicated}
spec:
  controllerName: coxswain.dev/gateway-controller
  parametersRef: {group: gateway.coxswain.dev, kind: CoxswainGatewayParameters, name: big, namespace: infra}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: theirs}
spec: {controllerName: example.com/other}
---
apiVersion: gateway.coxswain.dev/v1alpha1
kind: CoxswainGatewayParameters
metadata: {name: big, namespace: infra}
---
apiVersion: gateway.coxswain.dev/v1alpha1
kind: CoxswainGatewayParameters
metadata: {name: own, namespace: prod}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: shared, namespace: prod}
spec:
  gatewayClassName: coxswain
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: prod}
spec:
  gatewayClassName: coxswain
  infrastructure: {parametersRef: {group: gateway.coxswain.dev, kind: CoxswainGatewayParameters, name: own}}
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: api, namespace: prod}
spec:
  gatewayClassName: dedicated
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: other, namespace: prod}
spec:
  gatewayClassName: theirs
  listeners: [{name: http, port: 80, protocol: HTTP}]
`

func build(t *testing.T, yaml string) *graph.Graph {
	t.Helper()
	cs, err := state.Decode(strings.NewReader(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return graph.Build(cs, graph.Options{})
}

func TestAuthorityAnswersNotReadyBeforeTheFirstGraph(t *testing.T) {
	t.Parallel()
	_, err := New().ExpectedServiceAccount("prod", "web")
	if !errors.Is(err, ErrNotReady) || errors.Is(err, stream.ErrUnknownGateway) {
		t.Fatalf("error %v, want ErrNotReady and not ErrUnknownGateway", err)
	}
}

func TestAuthorityAnswers(t *testing.T) {
	t.Parallel()
	a := New()
	a.Update(build(t, world))
	tests := []struct {
		name, namespace, gateway, want string
	}{
		{"a Gateway with its own parameters belongs to <gateway>-<class>", "prod", "web", "web-coxswain"},
		{"a Gateway of a dedicated class belongs to <gateway>-<class>", "prod", "api", "api-dedicated"},
		{"a shared pool Gateway has no dedicated proxy", "prod", "shared", ""},
		{"another controller's Gateway is unknown", "prod", "other", ""},
		{"a missing Gateway is unknown", "prod", "missing", ""},
		{"a Gateway name in another namespace is unknown", "staging", "web", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := a.ExpectedServiceAccount(tt.namespace, tt.gateway)
			if tt.want == "" {
				if !errors.Is(err, stream.ErrUnknownGateway) {
					t.Fatalf("got %q, %v; want ErrUnknownGateway", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestAuthorityUpdateRunsHooksOnlyOnChange(t *testing.T) {
	t.Parallel()
	a := New()
	changes := 0
	var ids [][]ServiceAccount
	a.OnChange(func() { changes++ })
	a.OnDedicatedIdentities(func(set []ServiceAccount) { ids = append(ids, set) })

	if !a.Update(build(t, world)) {
		t.Fatal("the first update reported no change")
	}
	if changes != 0 {
		t.Errorf("the first update ran the revocation hook %d times; nothing was authorized before", changes)
	}
	want := []ServiceAccount{{Namespace: "prod", Name: "api-dedicated"}, {Namespace: "prod", Name: "web-coxswain"}}
	if len(ids) != 1 || !cmp.Equal(ids[0], want) {
		t.Fatalf("identities %v, want one call with %v", ids, want)
	}

	if a.Update(build(t, world)) || changes != 0 || len(ids) != 1 {
		t.Fatalf("an unchanged graph ran hooks: changes %d, identity calls %d", changes, len(ids))
	}

	withoutWeb := strings.Replace(world, "metadata: {name: web, namespace: prod}", "metadata: {name: web2, namespace: staging}", 1)
	if !a.Update(build(t, withoutWeb)) || changes != 1 || len(ids) != 2 {
		t.Fatalf("removing a dedicated Gateway: changes %d, identity calls %d; want 1 and 2", changes, len(ids))
	}
	if _, err := a.ExpectedServiceAccount("prod", "web"); !errors.Is(err, stream.ErrUnknownGateway) {
		t.Errorf("the removed Gateway still answers: %v", err)
	}
	if diff := cmp.Diff([]ServiceAccount{{Namespace: "prod", Name: "api-dedicated"}}, ids[1]); diff != "" {
		t.Errorf("identities after removal (-want +got):\n%s", diff)
	}
}

package state

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestDecode(t *testing.T) {
	t.Parallel()
	in := `
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: coxswain
spec:
  controllerName: coxswain.dev/gateway-controller
---
# a comment-only document is skipped
---
apiVersion: gateway.coxswain.dev/v1alpha1
kind: CoxswainGatewayParameters
metadata:
  name: big
  namespace: infra
spec:
  anything: goes
---
apiVersion: v1
kind: Namespace
metadata:
  name: infra
`
	cs, err := Decode(strings.NewReader(in))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if _, ok := cs.GatewayClasses[types.NamespacedName{Name: "coxswain"}]; !ok {
		t.Error("GatewayClass not decoded")
	}
	if _, ok := cs.GatewayParameters[types.NamespacedName{Namespace: "infra", Name: "big"}]; !ok {
		t.Error("CoxswainGatewayParameters not recorded")
	}
	if _, ok := cs.Namespaces[types.NamespacedName{Name: "infra"}]; !ok {
		t.Error("Namespace not decoded")
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"an unknown field", "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\nspec:\n  portz: []\n", "unknown field"},
		{"an unsupported kind", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n", "unsupported kind"},
		{"a duplicate object", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n", "duplicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Decode(strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

package conformance

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/features"

	"coxswain.dev/coxswain/api/v1alpha1"
)

// startAPIServer runs etcd and kube-apiserver (KUBEBUILDER_ASSETS, else the repository's
// bin/k8s) with our CRDs and the pinned Gateway API CRDs, and returns a client of the harness's
// scheme. It skips the test when the binaries are not there.
func startAPIServer(t *testing.T) client.Client {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Skipf("no kube-apiserver in %s (run hack/k8s-assets.sh or set KUBEBUILDER_ASSETS)", assets)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths: []string{
			filepath.Join(root, "config", "crd", "bases"),
			filepath.Join(root, "config", "gateway-api"),
		},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Tests, against the real CRDs, that each mode's objects are accepted (the dedicated class
// naming its parameters, the shared class naming none), that Ensure is repeatable and puts back
// a spec edited in between, that ClassFeatures waits for the status the operator writes and
// returns its features, and that Remove takes everything away.
func TestModeObjectsOnARealAPIServer(t *testing.T) {
	c := startAPIServer(t)
	ctx := t.Context()

	for _, mode := range Modes {
		objs := mode.Objects(v1alpha1.HTTP1EngineNative)
		if err := Ensure(ctx, c, objs); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		var class gwapiv1.GatewayClass
		if err := c.Get(ctx, client.ObjectKey{Name: mode.ClassName()}, &class); err != nil {
			t.Fatal(err)
		}
		ref := class.Spec.ParametersRef
		if (ref != nil) != (mode == Dedicated) {
			t.Fatalf("%s: class parametersRef = %+v", mode, ref)
		}
		if mode == Dedicated {
			var params v1alpha1.CoxswainGatewayParameters
			key := client.ObjectKey{Namespace: string(*ref.Namespace), Name: ref.Name}
			if string(ref.Group) != v1alpha1.GroupVersion.Group || ref.Kind != "CoxswainGatewayParameters" {
				t.Fatalf("class parametersRef names %s/%s", ref.Group, ref.Kind)
			}
			if err := c.Get(ctx, key, &params); err != nil {
				t.Fatalf("the class's parametersRef %s does not resolve: %v", key, err)
			}
			params.Spec.Replicas = new(int32(3))
			if err := c.Update(ctx, &params); err != nil {
				t.Fatal(err)
			}
		}
		// A second Ensure (a rerun on a cluster that stayed up) succeeds and restores the spec.
		if err := Ensure(ctx, c, objs); err != nil {
			t.Fatalf("%s, again: %v", mode, err)
		}
		if mode == Dedicated {
			var params v1alpha1.CoxswainGatewayParameters
			if err := c.Get(ctx, client.ObjectKey{Namespace: ParametersNamespace, Name: ParametersName}, &params); err != nil {
				t.Fatal(err)
			}
			if params.Spec.Replicas == nil || *params.Spec.Replicas != 1 {
				t.Errorf("Ensure left replicas at %v, want 1", params.Spec.Replicas)
			}
			if e := params.Spec.HTTP1Engine; e == nil || *e != v1alpha1.HTTP1EngineNative {
				t.Errorf("parameters' HTTP/1.1 engine = %v, want %s", e, v1alpha1.HTTP1EngineNative)
			}
		}
	}

	// No operator runs here: ClassFeatures times out and says why, then sees the status this
	// test writes in the operator's place.
	name := Dedicated.ClassName()
	_, err := ClassFeatures(ctx, c, name, 500*time.Millisecond)
	if !wait.Interrupted(err) || !strings.Contains(err.Error(), "Accepted=Unknown") {
		t.Fatalf("ClassFeatures without an operator: %v, want a timeout naming the Accepted condition", err)
	}
	t.Logf("without an operator: %v", err)
	var class gwapiv1.GatewayClass
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &class); err != nil {
		t.Fatal(err)
	}
	class.Status.Conditions = []metav1.Condition{{
		Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: class.Generation,
		LastTransitionTime: metav1.Now(),
	}}
	class.Status.SupportedFeatures = []gwapiv1.SupportedFeature{{Name: "Gateway"}, {Name: "HTTPRoute"}}
	if err := c.Status().Update(ctx, &class); err != nil {
		t.Fatal(err)
	}
	got, err := ClassFeatures(ctx, c, name, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := []features.FeatureName{"Gateway", "HTTPRoute"}; !slices.Equal(got, want) {
		t.Errorf("ClassFeatures = %v, want %v", got, want)
	}

	for _, mode := range Modes {
		if err := Remove(ctx, c, mode.Objects("")); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKey{Name: mode.ClassName()}, &class); client.IgnoreNotFound(err) != nil || err == nil {
			t.Errorf("%s class after Remove: %v", mode, err)
		}
	}
}

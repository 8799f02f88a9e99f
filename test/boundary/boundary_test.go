package boundary

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDiscoveryAndProxyHoldNoKubernetesClient(t *testing.T) {
	t.Parallel()
	for _, module := range []string{"discovery", "proxy"} {
		t.Run(module, func(t *testing.T) {
			t.Parallel()
			pkgs, err := ListDeps(t.Context(), filepath.Join("..", "..", module))
			if err != nil {
				t.Fatal(err)
			}
			if len(pkgs) == 0 {
				t.Fatal("go list returned no packages: the check would pass vacuously")
			}
			if bad := Violations(pkgs); len(bad) > 0 {
				t.Errorf("the %s module depends on forbidden packages:\n%v", module, bad)
			}
		})
	}
}

func TestViolationsCatchesEachForbiddenKind(t *testing.T) {
	t.Parallel()
	pkgs := []Package{
		{ImportPath: "fmt"},
		{ImportPath: "coxswain.dev/coxswain/discovery/pki", Module: "coxswain.dev/coxswain/discovery"},
		{ImportPath: "k8s.io/client-go/rest", Module: "k8s.io/client-go"},
		{ImportPath: "sigs.k8s.io/controller-runtime", Module: "sigs.k8s.io/controller-runtime"},
		{ImportPath: "coxswain.dev/coxswain/internal/graph", Module: "coxswain.dev/coxswain"},
		{ImportPath: "k8s.io/client-go-lookalike/x", Module: "k8s.io/client-go-lookalike"},
	}
	want := []string{
		"k8s.io/client-go/rest",
		"sigs.k8s.io/controller-runtime",
		"coxswain.dev/coxswain/internal/graph (the operator's root module)",
	}
	if diff := cmp.Diff(want, Violations(pkgs)); diff != "" {
		t.Errorf("Violations() mismatch (-want +got):\n%s", diff)
	}
}

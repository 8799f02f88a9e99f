package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/internal/testenv"
)

// TestChartInstallsUpgradesUninstalls runs helm itself against a real kube-apiserver and etcd
// with nothing installed: install (our CRDs from crds/ first, then the release with the
// CoxswainConfig of config), an upgrade to external CA mode (the Role that lets the controller
// write Secrets goes), uninstall (the CRDs stay, the rest goes, the CoxswainConfig with it), and
// an install again over the CRDs left behind.
func TestChartInstallsUpgradesUninstalls(t *testing.T) {
	assets, err := testenv.AssetsDir(root(t))
	if err != nil {
		t.Fatalf("control plane binaries: %v (run make k8s-assets or set KUBEBUILDER_ASSETS)", err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := env.AddUser(envtest.User{Name: "chart-test", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	helm := func(args ...string) {
		t.Helper()
		args = append(args, "--kubeconfig", kc, "--namespace", namespace)
		out, stderr, err := runHelmEnv(t, []string{"HELM_CACHE_HOME=" + filepath.Join(dir, "cache"), "HELM_CONFIG_HOME=" + filepath.Join(dir, "config"), "HELM_DATA_HOME=" + filepath.Join(dir, "data")}, args...)
		if err != nil {
			t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
	}
	chart := chartDir(t)

	helm("install", "coxswain", chart, "--create-namespace", "--set", "config.proxy.replicas=3")
	var cfgObj v1alpha1.CoxswainConfig
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: "coxswain"}, &cfgObj); err != nil {
		t.Fatalf("the CoxswainConfig of config after install: %v", err)
	}
	if cfgObj.Spec.Proxy == nil || cfgObj.Spec.Proxy.Replicas == nil || *cfgObj.Spec.Proxy.Replicas != 3 {
		t.Errorf("CoxswainConfig spec %+v, want proxy.replicas 3", cfgObj.Spec)
	}
	role := types.NamespacedName{Namespace: namespace, Name: "coxswain-manager"}
	if err := c.Get(t.Context(), role, &rbacv1.Role{}); err != nil {
		t.Errorf("auto mode: the Secret-writing Role: %v", err)
	}

	helm("upgrade", "coxswain", chart, "--set", "discovery.ca.mode=external", "--set", "config.proxy.replicas=4")
	for _, obj := range []client.Object{&rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		if err := c.Get(t.Context(), role, obj); !apierrors.IsNotFound(err) {
			t.Errorf("external mode after upgrade: %T coxswain-manager: %v, want it gone", obj, err)
		}
	}
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: "coxswain"}, &cfgObj); err != nil || *cfgObj.Spec.Proxy.Replicas != 4 {
		t.Errorf("the CoxswainConfig after upgrade: %v, replicas %v, want 4", err, cfgObj.Spec.Proxy)
	}

	helm("uninstall", "coxswain")
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(t.Context(), &crds); err != nil {
		t.Fatal(err)
	}
	if len(crds.Items) != 12 {
		t.Errorf("%d CRDs after uninstall, want the 12 the chart installed kept", len(crds.Items))
	}
	for _, name := range []string{"coxswain-controller", "coxswain-shared-proxy"} {
		if err := c.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: name}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			t.Errorf("Deployment %s after uninstall: %v, want it gone", name, err)
		}
	}
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: "coxswain"}, &v1alpha1.CoxswainConfig{}); !apierrors.IsNotFound(err) {
		t.Errorf("the CoxswainConfig of config after uninstall: %v, want it gone with the release", err)
	}

	// Installed again over the CRDs the first release left: Helm skips ours in crds/ that
	// exist, and adopts the Gateway API's it kept, whose ownership marks name this release.
	helm("install", "coxswain", chart, "--set", "config.proxy.replicas=2")
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: "coxswain"}, &cfgObj); err != nil || *cfgObj.Spec.Proxy.Replicas != 2 {
		t.Errorf("the CoxswainConfig after installing again: %v, replicas %v, want 2", err, cfgObj.Spec.Proxy)
	}
}

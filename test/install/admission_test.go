package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// admissionPolicy is the ValidatingAdmissionPolicy of config/admission.
const admissionPolicy = "coxswain-controller-writes"

// Tests the admission policy that bounds the controller's writes against the real API server:
// as the controller's ServiceAccount, every object the provisioner renders (its goldens) and
// the trust bundle ConfigMap are admitted, and every write that would let a compromised
// controller escape (another image, ServiceAccount, host path, privilege, API token, foreign
// object or selector) is refused.
func TestAdmissionPolicyBoundsTheControllersWrites(t *testing.T) {
	ctx := t.Context()
	installRBAC(t, "default")
	goldens := provisionGoldens(t)
	installAdmissionPolicy(t, "default", goldenImages(goldens))
	controller := controllerClient(t)
	namespaces := []string{"default", "payments", "prod", "team-a", "tenant", "foreign"}
	for _, u := range goldens { // every namespace the goldens render into, long names included
		if ns := u.GetNamespace(); ns != "" && !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	for _, ns := range namespaces {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	proxy := findGolden(t, goldens, "Deployment", "prod")
	waitRefused(t, controller, mutated(proxy, func(u map[string]any) {
		setPath(u, "evil.example/miner:1", "spec", "template", "spec", "containers", 0, "image")
	}))

	t.Run("what the provisioner renders is admitted", func(t *testing.T) {
		for _, u := range append(goldens, trustBundle("prod"), trustBundle(wellknown.InstallNamespace)) {
			if err := dryRunCreate(ctx, controller, u); err != nil {
				t.Errorf("%s %s/%s refused: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
			}
		}
	})

	svc := findGolden(t, goldens, "Service", "prod")
	sa := findGolden(t, goldens, "ServiceAccount", "prod")
	pdb := findGolden(t, goldens, "PodDisruptionBudget", "")
	forbidden := []struct {
		name string
		obj  *unstructured.Unstructured
	}{
		{"a Deployment of another image", mutated(proxy, func(u map[string]any) {
			setPath(u, "evil.example/miner:1", "spec", "template", "spec", "containers", 0, "image")
		})},
		{"an init container of another image", mutated(proxy, func(u map[string]any) {
			setPath(u, []any{map[string]any{"name": "init", "image": "evil.example/miner:1"}}, "spec", "template", "spec", "initContainers")
		})},
		{"a Deployment running as another ServiceAccount", mutated(proxy, func(u map[string]any) {
			setPath(u, "cluster-admin-sa", "spec", "template", "spec", "serviceAccountName")
		})},
		{"a Deployment mounting an API token", mutated(proxy, func(u map[string]any) {
			setPath(u, true, "spec", "template", "spec", "automountServiceAccountToken")
		})},
		{"a Deployment with a hostPath volume", mutated(proxy, func(u map[string]any) {
			appendPath(u, map[string]any{"name": "host", "hostPath": map[string]any{"path": "/"}}, "spec", "template", "spec", "volumes")
		})},
		{"a Deployment mounting a Secret", mutated(proxy, func(u map[string]any) {
			appendPath(u, map[string]any{"name": "s", "secret": map[string]any{"secretName": "db"}}, "spec", "template", "spec", "volumes")
		})},
		{"a Deployment with a token for the API server's audience", mutated(proxy, func(u map[string]any) {
			appendPath(u, map[string]any{"name": "api", "projected": map[string]any{"sources": []any{
				map[string]any{"serviceAccountToken": map[string]any{"path": "t", "audience": "https://kubernetes.default.svc"}},
			}}}, "spec", "template", "spec", "volumes")
		})},
		{"a privileged container", mutated(proxy, func(u map[string]any) {
			setPath(u, true, "spec", "template", "spec", "containers", 0, "securityContext", "privileged")
			setPath(u, true, "spec", "template", "spec", "containers", 0, "securityContext", "allowPrivilegeEscalation")
		})},
		{"a container adding a capability", mutated(proxy, func(u map[string]any) {
			setPath(u, []any{"NET_ADMIN"}, "spec", "template", "spec", "containers", 0, "securityContext", "capabilities", "add")
		})},
		{"a Deployment in the host network", mutated(proxy, func(u map[string]any) {
			setPath(u, true, "spec", "template", "spec", "hostNetwork")
			deletePath(u, "spec", "template", "spec", "securityContext", "sysctls") // not allowed beside hostNetwork
		})},
		{"a Deployment without our label", mutated(proxy, func(u map[string]any) {
			deletePath(u, "metadata", "labels", "app.kubernetes.io/managed-by")
		})},
		{"a Service without our label", mutated(svc, func(u map[string]any) { deletePath(u, "metadata", "labels", "app.kubernetes.io/managed-by") })},
		{"a Service selecting other pods", mutated(svc, func(u map[string]any) {
			setPath(u, map[string]any{"app": "database"}, "spec", "selector")
		})},
		{"a Service with external IPs", mutated(svc, func(u map[string]any) { setPath(u, []any{"10.0.0.1"}, "spec", "externalIPs") })},
		{"a ServiceAccount without our label", mutated(sa, func(u map[string]any) { deletePath(u, "metadata", "labels", "app.kubernetes.io/managed-by") })},
		{"a ConfigMap of another name", mutated(trustBundle("prod"), func(u map[string]any) { setPath(u, "app-settings", "metadata", "name") })},
		{"a PodDisruptionBudget selecting other pods", mutated(pdb, func(u map[string]any) {
			setPath(u, map[string]any{"app": "database"}, "spec", "selector", "matchLabels")
		})},
		{"a container with a hostPort", mutated(proxy, func(u map[string]any) {
			setPath(u, int64(30080), "spec", "template", "spec", "containers", 0, "ports", 0, "hostPort")
		})},
		{"an init container with a hostPort", mutated(proxy, func(u map[string]any) {
			init := copyPath(u, "spec", "template", "spec", "containers", 0).(map[string]any)
			init["name"] = "init"
			setPath(init, int64(30080), "ports", 0, "hostPort")
			deletePath(init, "readinessProbe")
			deletePath(init, "livenessProbe")
			setPath(u, []any{init}, "spec", "template", "spec", "initContainers")
		})},
		{"a Deployment bound to a node by name", mutated(proxy, func(u map[string]any) {
			setPath(u, "control-plane-1", "spec", "template", "spec", "nodeName")
		})},
		{"a toleration of the control-plane taint", mutated(proxy, func(u map[string]any) {
			appendPath(u, map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
				"spec", "template", "spec", "tolerations")
		})},
		{"a toleration of the former master taint", mutated(proxy, func(u map[string]any) {
			appendPath(u, map[string]any{"key": "node-role.kubernetes.io/master", "operator": "Exists"}, "spec", "template", "spec", "tolerations")
		})},
		{"a toleration of every taint (Exists without a key)", mutated(proxy, func(u map[string]any) {
			appendPath(u, map[string]any{"operator": "Exists"}, "spec", "template", "spec", "tolerations")
		})},
		{"a pod running as root", mutated(proxy, func(u map[string]any) {
			setPath(u, int64(0), "spec", "template", "spec", "securityContext", "runAsUser")
		})},
		{"a container running as root", mutated(proxy, func(u map[string]any) {
			setPath(u, int64(0), "spec", "template", "spec", "containers", 0, "securityContext", "runAsUser")
		})},
		{"a container allowing privilege escalation", mutated(proxy, func(u map[string]any) {
			setPath(u, true, "spec", "template", "spec", "containers", 0, "securityContext", "allowPrivilegeEscalation")
		})},
		{"a container leaving privilege escalation unset", mutated(proxy, func(u map[string]any) {
			sc := copyPath(u, "spec", "template", "spec", "containers", 0, "securityContext").(map[string]any)
			delete(sc, "allowPrivilegeEscalation")
			setPath(u, sc, "spec", "template", "spec", "containers", 0, "securityContext")
		})},
		{"a pod without runAsNonRoot", mutated(proxy, func(u map[string]any) {
			deletePath(u, "spec", "template", "spec", "securityContext", "runAsNonRoot")
		})},
		{"a container overriding runAsNonRoot", mutated(proxy, func(u map[string]any) {
			setPath(u, false, "spec", "template", "spec", "containers", 0, "securityContext", "runAsNonRoot")
		})},
		{"a container with a writable root filesystem", mutated(proxy, func(u map[string]any) {
			setPath(u, false, "spec", "template", "spec", "containers", 0, "securityContext", "readOnlyRootFilesystem")
		})},
		{"a Deployment in kube-system", inNamespace(proxy, metav1.NamespaceSystem)},
		{"a Deployment in kube-node-lease", inNamespace(proxy, corev1.NamespaceNodeLease)},
		{"a LoadBalancer Service in kube-system", mutated(inNamespace(svc, metav1.NamespaceSystem), func(u map[string]any) {
			setPath(u, "LoadBalancer", "spec", "type")
		})},
		{"a Service in kube-public", inNamespace(svc, metav1.NamespacePublic)},
		{"a ServiceAccount in kube-system", inNamespace(sa, metav1.NamespaceSystem)},
		{"a trust bundle ConfigMap in kube-system", trustBundle(metav1.NamespaceSystem)},
		{"a PodDisruptionBudget in kube-system", inNamespace(pdb, metav1.NamespaceSystem)},
	}
	for _, tt := range forbidden {
		t.Run(tt.name+" is refused", func(t *testing.T) {
			assertRefused(t, dryRunCreate(ctx, controller, tt.obj))
		})
	}

	t.Run("a foreign object is neither taken over nor deleted", func(t *testing.T) {
		foreign := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "foreign", Name: "database"},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "database"}, Ports: []corev1.ServicePort{{Port: 5432}}},
		}
		if err := c.Create(ctx, foreign); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		taken := foreign.DeepCopy()
		if err := controller.Get(ctx, client.ObjectKeyFromObject(foreign), taken); err != nil {
			t.Fatal(err)
		}
		taken.Labels = map[string]string{"app.kubernetes.io/managed-by": "coxswain"}
		taken.Spec.Selector = map[string]string{"app.kubernetes.io/name": "coxswain", "app.kubernetes.io/component": "proxy"}
		assertRefused(t, controller.Update(ctx, taken, client.DryRunAll))
		assertRefused(t, controller.Delete(ctx, foreign, client.DryRunAll))
	})

	t.Run("the controller updates and deletes what it made", func(t *testing.T) {
		made := mutated(svc, func(u map[string]any) {
			setPath(u, "tenant", "metadata", "namespace")
			deletePath(u, "metadata", "ownerReferences")
		})
		made.SetName("made-by-controller")
		if err := controller.Create(ctx, made); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create: %v", err)
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(made.GroupVersionKind())
		if err := controller.Get(ctx, client.ObjectKeyFromObject(made), got); err != nil {
			t.Fatal(err)
		}
		got.SetAnnotations(map[string]string{"updated": "yes"})
		if err := controller.Update(ctx, got); err != nil {
			t.Errorf("update of its own Service refused: %v", err)
		}
		if err := controller.Delete(ctx, got); err != nil {
			t.Errorf("delete of its own Service refused: %v", err)
		}
	})

	t.Run("others are not bound by the policy", func(t *testing.T) {
		if err := dryRunCreate(ctx, c, forbidden[0].obj); err != nil {
			t.Errorf("an administrator's Deployment of another image was refused: %v", err)
		}
	})

	t.Run("with the namespace gate, the controller writes only in labelled namespaces", func(t *testing.T) {
		for name, labels := range map[string]map[string]string{"gated": {namespaceGateLabel: "allowed"}, "ungated": nil} {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
			if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		installAdmissionPolicy(t, "overlays/namespace-gate", goldenImages(goldens))
		defer func() { // the other tests of the package want config/default's policy
			installAdmissionPolicy(t, "default", goldenImages(goldens))
			waitAdmitted(t, controller, inNamespace(proxy, "ungated"))
		}()
		waitRefused(t, controller, inNamespace(proxy, "ungated"))
		for _, u := range []*unstructured.Unstructured{inNamespace(proxy, "ungated"), inNamespace(svc, "ungated"), trustBundle("ungated")} {
			assertRefused(t, dryRunCreate(ctx, controller, u))
		}
		for _, u := range []*unstructured.Unstructured{inNamespace(proxy, "gated"), inNamespace(svc, "gated"), inNamespace(sa, "gated"), trustBundle("gated")} {
			if err := dryRunCreate(ctx, controller, u); err != nil {
				t.Errorf("%s in a labelled namespace refused: %v", u.GetKind(), err)
			}
		}
	})
}

// namespaceGateLabel is the Namespace label of config/overlays/namespace-gate.
const namespaceGateLabel = "discovery.coxswain.dev/proxies"

// installAdmissionPolicy applies the admission policy and binding of the kustomize variant dir
// (under config/), with images added to the proxy images it admits (as docs/installation.md
// tells an operator whose CoxswainConfig or GatewayClass parameters name other images to do).
// The API server compiles its expressions on create and refuses one that does not compile.
func installAdmissionPolicy(t *testing.T, dir string, images []string) {
	t.Helper()
	ctx := t.Context()
	var objs []*unstructured.Unstructured
	for _, u := range ofKinds(kustomizeBuild(t, dir), "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding") {
		if u.GetName() != admissionPolicy {
			continue
		}
		if u.GetKind() == "ValidatingAdmissionPolicy" {
			addProxyImages(t, u, images)
		}
		objs = append(objs, u)
	}
	if len(objs) != 2 {
		t.Errorf("config/%s holds %d objects named %s, want the policy and its binding", dir, len(objs), admissionPolicy)
	}
	if err := apply(ctx, objs, false); err != nil {
		t.Fatal(err)
	}
}

// addProxyImages adds images to the policy's proxyImages list.
func addProxyImages(t *testing.T, policy *unstructured.Unstructured, images []string) {
	t.Helper()
	vars, _, _ := unstructured.NestedSlice(policy.Object, "spec", "variables")
	for _, v := range vars {
		v := v.(map[string]any)
		if v["name"] != "proxyImages" {
			continue
		}
		list := strings.TrimSuffix(v["expression"].(string), "]")
		for _, image := range images {
			list += ", '" + image + "'"
		}
		v["expression"] = list + "]"
		if err := unstructured.SetNestedSlice(policy.Object, vars, "spec", "variables"); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s has no proxyImages variable", admissionPolicy)
}

// controllerClient reaches the API server as the controller's ServiceAccount.
func controllerClient(t *testing.T) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(restConfig)
	cfg.WarningHandler = rest.NewWarningWriter(os.Stderr, rest.WarningWriterOptions{})
	ns := wellknown.InstallNamespace
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + wellknown.ControllerServiceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// waitRefused waits until the policy refuses obj: it takes effect a moment after it is created.
func waitRefused(t *testing.T, cl client.Client, obj *unstructured.Unstructured) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := dryRunCreate(t.Context(), cl, obj)
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the admission policy never refused the controller's %s %s/%s (last answer: %v)", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
			return
		}
		time.Sleep(100 * time.Millisecond) // polling for the policy to take effect, with the deadline above
	}
}

// waitAdmitted waits until the policy admits obj, as waitRefused.
func waitAdmitted(t *testing.T, cl client.Client, obj *unstructured.Unstructured) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := dryRunCreate(t.Context(), cl, obj)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the admission policy never admitted the controller's %s %s/%s (last answer: %v)", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
			return
		}
		time.Sleep(100 * time.Millisecond) // polling for the policy to take effect, with the deadline above
	}
}

// assertRefused fails unless err is the admission policy's refusal.
func assertRefused(t *testing.T, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Error("admitted")
	case !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err):
		t.Errorf("refused for another reason: %v", err)
	case !strings.Contains(err.Error(), admissionPolicy):
		t.Errorf("refused, but not by %s: %v", admissionPolicy, err)
	}
}

func dryRunCreate(ctx context.Context, cl client.Client, u *unstructured.Unstructured) error {
	return cl.Create(ctx, u.DeepCopy(), client.DryRunAll)
}

// provisionGoldens are the objects internal/provision's golden tests render.
func provisionGoldens(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "internal", "provision", "testdata", "*.out.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no provisioner goldens: %v", err)
	}
	var out []*unstructured.Unstructured
	for _, p := range paths {
		f, err := os.Open(p) //nolint:gosec // a golden file of the repository
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeAll(f)
		_ = f.Close()
		if err != nil {
			t.Fatalf("decode %s: %v", p, err)
		}
		out = append(out, objs...)
	}
	return out
}

// goldenImages are the images of the goldens' Deployments.
func goldenImages(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, u := range ofKinds(objs, "Deployment") {
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			if image, ok := c.(map[string]any)["image"].(string); ok && !slices.Contains(out, image) {
				out = append(out, image)
			}
		}
	}
	slices.Sort(out)
	return out
}

// findGolden returns a golden object of kind, in namespace when it is not empty.
func findGolden(t *testing.T, objs []*unstructured.Unstructured, kind, namespace string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range ofKinds(objs, kind) {
		if namespace == "" || u.GetNamespace() == namespace {
			return u
		}
	}
	t.Fatalf("no golden %s in %q", kind, namespace)
	return nil
}

// trustBundle is the trust bundle ConfigMap as internal/identity/trustbundle writes it.
func trustBundle(namespace string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"namespace": namespace, "name": wellknown.TrustBundleConfigMapName,
			"labels": map[string]any{"app.kubernetes.io/managed-by": "coxswain", "app.kubernetes.io/component": "discovery-trust"},
		},
		"data": map[string]any{wellknown.TrustBundleKey: "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"},
	}}
	return u
}

// mutated returns a copy of u changed by mutate.
func mutated(u *unstructured.Unstructured, mutate func(map[string]any)) *unstructured.Unstructured {
	out := u.DeepCopy()
	mutate(out.Object)
	return out
}

// setPath sets the value at path (map keys and slice indexes) of obj, creating maps on the way.
func setPath(obj map[string]any, value any, path ...any) {
	var cur any = obj
	for i, step := range path {
		last := i == len(path)-1
		switch s := step.(type) {
		case string:
			m := cur.(map[string]any)
			if last {
				m[s] = value
				return
			}
			if _, ok := m[s]; !ok {
				m[s] = map[string]any{}
			}
			cur = m[s]
		case int:
			l := cur.([]any)
			if last {
				l[s] = value
				return
			}
			cur = l[s]
		default:
			panic(fmt.Sprintf("path step %v", step))
		}
	}
}

// appendPath appends value to the list at path of obj.
func appendPath(obj map[string]any, value any, path ...string) {
	list, _, _ := unstructured.NestedSlice(obj, path...)
	if err := unstructured.SetNestedSlice(obj, append(list, value), path...); err != nil {
		panic(err)
	}
}

// copyPath returns a deep copy of the value at path (map keys and slice indexes) of obj.
func copyPath(obj map[string]any, path ...any) any {
	var cur any = obj
	for _, step := range path {
		switch s := step.(type) {
		case string:
			cur = cur.(map[string]any)[s]
		case int:
			cur = cur.([]any)[s]
		default:
			panic(fmt.Sprintf("path step %v", step))
		}
	}
	return runtime.DeepCopyJSONValue(cur)
}

// inNamespace returns a copy of u in namespace ns.
func inNamespace(u *unstructured.Unstructured, ns string) *unstructured.Unstructured {
	out := u.DeepCopy()
	out.SetNamespace(ns)
	return out
}

// deletePath removes the field at path of obj.
func deletePath(obj map[string]any, path ...string) { unstructured.RemoveNestedField(obj, path...) }

// Tests that the controller may update and delete only the trust bundle's ConfigMaps (RBAC
// resourceNames), while it still reads every ConfigMap (BackendTLSPolicy CA certificates).
func TestControllerWritesOnlyTheTrustBundleConfigMap(t *testing.T) {
	installRBAC(t, "default")
	can := func(verb, name string) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + wellknown.InstallNamespace + ":" + wellknown.ControllerServiceAccount,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + wellknown.InstallNamespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Resource: "configmaps", Namespace: "prod", Name: name,
			},
		}}
		if err := c.Create(t.Context(), sar); err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		return sar.Status.Allowed
	}
	for _, verb := range []string{"update", "patch", "delete"} {
		if can(verb, "app-settings") {
			t.Errorf("the controller may %s the ConfigMap prod/app-settings", verb)
		}
	}
	for _, verb := range []string{"update", "delete", "get"} {
		if !can(verb, wellknown.TrustBundleConfigMapName) {
			t.Errorf("the controller may not %s the trust bundle ConfigMap", verb)
		}
	}
	if !can("get", "app-settings") || !can("list", "") || !can("create", "") {
		t.Error("the controller may not read ConfigMaps or create the trust bundle's")
	}
}

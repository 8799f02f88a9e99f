package install

import (
	"context"
	"fmt"
	"slices"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// Tests that every overlay builds and that the API server accepts each of its objects in a
// server-side dry-run apply (after the namespace exists, as kubectl would create it first). The
// cert-manager kinds are left out: this API server has no cert-manager CRDs.
func TestEveryOverlayPassesAServerSideDryRun(t *testing.T) {
	ctx := context.Background()
	for _, dir := range []string{"default", "overlays/external-ca", "overlays/cert-manager", "overlays/namespace-gate"} {
		t.Run(dir, func(t *testing.T) {
			objs := kustomizeBuild(t, dir)
			if err := apply(ctx, ofKinds(objs, "Namespace"), false); err != nil {
				t.Fatal(err)
			}
			var checked []*unstructured.Unstructured
			for _, u := range objs {
				if u.GroupVersionKind().Group == "cert-manager.io" {
					if dir != "overlays/cert-manager" {
						t.Errorf("%s holds cert-manager %s %s", dir, u.GetKind(), u.GetName())
					}
					continue
				}
				checked = append(checked, u)
			}
			if err := apply(ctx, checked, true); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// access is one request a subject may or may not be allowed.
type access struct {
	verb, group, resource, namespace string
}

func (a access) String() string {
	return fmt.Sprintf("%s %s.%s in %q", a.verb, a.resource, a.group, a.namespace)
}

// everything is a sample of what a compromised proxy would want to do.
var everything = func() []access {
	var out []access
	for _, r := range []struct{ group, resource string }{
		{"", "secrets"},
		{"", "configmaps"},
		{"", "pods"},
		{"", "services"},
		{"", "serviceaccounts"},
		{"", "endpoints"},
		{"apps", "deployments"},
		{"gateway.networking.k8s.io", "gateways"},
		{"gateway.networking.k8s.io", "httproutes"},
		{"gateway.coxswain.dev", "coxswainconfigs"},
		{"coordination.k8s.io", "leases"},
		{"events.k8s.io", "events"},
	} {
		for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
			for _, ns := range []string{wellknown.InstallNamespace, "prod"} {
				out = append(out, access{verb, r.group, r.resource, ns})
			}
		}
	}
	out = append(out,
		access{"create", "authentication.k8s.io", "tokenreviews", ""},
		access{"create", "", "serviceaccounts/token", "prod"},
		access{"list", "", "namespaces", ""},
	)
	return out
}()

func allowed(t *testing.T, sa string, namespace string, a access) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + namespace + ":" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.namespace,
		},
	}}
	if err := c.Create(context.Background(), sar); err != nil {
		t.Fatalf("SubjectAccessReview: %v", err)
	}
	return sar.Status.Allowed
}

// installRBAC applies the RBAC objects and ServiceAccounts an overlay holds, and deletes the
// Roles and RoleBindings of the install namespace that it does not hold, so the cluster has
// exactly that overlay's grants.
func installRBAC(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	objs := kustomizeBuild(t, dir)
	if err := apply(ctx, ofKinds(objs, "Namespace"), false); err != nil {
		t.Fatal(err)
	}
	rbac := ofKinds(objs, "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
	if err := apply(ctx, rbac, false); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"Role", "RoleBinding"} {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("rbac.authorization.k8s.io/v1")
		list.SetKind(kind + "List")
		if err := c.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			item := &list.Items[i]
			if item.GetNamespace() != wellknown.InstallNamespace {
				continue
			}
			held := slices.ContainsFunc(rbac, func(u *unstructured.Unstructured) bool {
				return u.GetKind() == kind && u.GetName() == item.GetName()
			})
			if !held {
				if err := c.Delete(ctx, item); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// Tests that with the install's RBAC the shared pool's and a dedicated proxy's ServiceAccounts
// are allowed nothing, while the controller is allowed what it needs (so the check can fail).
func TestProxyServiceAccountsCanDoNothing(t *testing.T) {
	installRBAC(t, "default")
	controller := []access{
		{"create", "authentication.k8s.io", "tokenreviews", ""},
		{"create", "", "secrets", wellknown.InstallNamespace},
		{"list", "gateway.networking.k8s.io", "gateways", ""},
		{"create", "apps", "deployments", "prod"},
	}
	for _, a := range controller {
		if !allowed(t, wellknown.ControllerServiceAccount, wellknown.InstallNamespace, a) {
			t.Errorf("the controller may not %s", a)
		}
	}
	if allowed(t, wellknown.ControllerServiceAccount, wellknown.InstallNamespace, access{"create", "", "secrets", "prod"}) {
		t.Error("the controller may create Secrets outside its namespace")
	}
	for _, sa := range []struct{ name, namespace string }{
		{wellknown.SharedProxyServiceAccount, wellknown.InstallNamespace},
		{wellknown.DedicatedProxyName("web", "coxswain"), "prod"},
	} {
		for _, a := range everything {
			if allowed(t, sa.name, sa.namespace, a) {
				t.Errorf("proxy ServiceAccount %s/%s may %s", sa.namespace, sa.name, a)
			}
		}
	}
}

// Tests that with the external-ca overlay the controller cannot create a Secret anywhere, and
// that the default install can in its own namespace (the positive control).
func TestExternalCAOverlayCannotCreateSecrets(t *testing.T) {
	createSecret := func(ns string) access { return access{"create", "", "secrets", ns} }
	installRBAC(t, "overlays/external-ca")
	for _, ns := range []string{wellknown.InstallNamespace, "prod", ""} {
		if allowed(t, wellknown.ControllerServiceAccount, wellknown.InstallNamespace, createSecret(ns)) {
			t.Errorf("with external-ca the controller may %s", createSecret(ns))
		}
	}
	if !allowed(t, wellknown.ControllerServiceAccount, wellknown.InstallNamespace, access{"get", "", "secrets", wellknown.InstallNamespace}) {
		t.Error("with external-ca the controller may not read its CA Secret")
	}
	installRBAC(t, "default")
	if !allowed(t, wellknown.ControllerServiceAccount, wellknown.InstallNamespace, createSecret(wellknown.InstallNamespace)) {
		t.Errorf("the default install may not %s", createSecret(wellknown.InstallNamespace))
	}
}

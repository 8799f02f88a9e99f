package identity

import (
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// Tests what SECURITY.md says of the identity boundary: a user holding the stock `edit` role in a
// proxy's namespace, who may not create pods as the proxy there, still mints a token bound to
// the running proxy pod through TokenRequest (serviceaccounts/token), and that token obtains
// the proxy's SVID. A user holding `view` may not mint one. Namespace RBAC, token creation
// included, is the boundary; the bound-pod check alone is not.
func TestAnEditorOfTheNamespaceMintsAProxyIdentity(t *testing.T) {
	ns := newNamespace(t, "token-request-editor")
	newServiceAccount(t, ns, "proxy")
	pod := newPod(t, ns, "proxy-0", "proxy")
	setPhase(t, pod, corev1.PodRunning)
	e := newBootstrapEnv(t, ns, newAuthenticator(t), "proxy")

	bind := func(user, role string) kubernetes.Interface {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		if err := k8sClient.Create(t.Context(), rb); err != nil {
			t.Fatalf("bind %s to %s: %v", user, role, err)
		}
		cfg := rest.CopyConfig(restConfig)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	mint := func(cs kubernetes.Interface) (string, error) {
		req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			Audiences:         []string{wellknown.TokenAudience},
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}
		resp, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), "proxy", req, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return resp.Status.Token, nil
	}

	t.Run("a viewer may not mint a token", func(t *testing.T) {
		if _, err := mint(bind("viewer", "view")); !apierrors.IsForbidden(err) {
			t.Fatalf("TokenRequest as a viewer: %v; want Forbidden", err)
		}
	})
	t.Run("an editor mints a token bound to the running pod, and it obtains the SVID", func(t *testing.T) {
		token, err := mint(bind("editor", "edit"))
		if err != nil {
			t.Fatalf("TokenRequest as an editor: %v", err)
		}
		if err := e.bootstrap(t, token); err != nil {
			t.Fatalf("bootstrap with the editor's token: %v; SECURITY.md says it succeeds", err)
		}
	})
}

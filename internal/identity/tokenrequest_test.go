package identity

import (
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
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
// proxy's namespace mints a token bound to the running proxy pod through TokenRequest
// (serviceaccounts/token), and that token obtains the proxy's SVID; so does a user whose only
// right is to create tokens, without running anything. A user holding `view` may not mint one.
// Namespace RBAC, token creation included, is the boundary; the bound-pod check alone is not.
// The stock roles are bound through the rules they aggregate (system:aggregate-to-edit and
// -view): aggregation is kube-controller-manager's work, which this API server runs without.
func TestAnEditorOfTheNamespaceMintsAProxyIdentity(t *testing.T) {
	ns := newNamespace(t, "token-request-editor")
	newServiceAccount(t, ns, "proxy")
	pod := newPod(t, ns, "proxy-0", "proxy")
	setPhase(t, pod, corev1.PodRunning)
	e := newBootstrapEnv(t, ns, newAuthenticator(t), "proxy")

	tokensOnly := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "token-creator"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}}},
	}
	if err := k8sClient.Create(t.Context(), tokensOnly); err != nil {
		t.Fatal(err)
	}
	bind := func(user, kind, role string) kubernetes.Interface {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
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

	// allowed waits until the API server's authorizer, which learns bindings from a cache of its
	// own, lets user do verb on resource/subresource: the binding is then in force.
	allowed := func(t *testing.T, user, verb, resource, subresource string) {
		t.Helper()
		eventually(t, 10*time.Second, user+" may "+verb+" "+resource, func() bool {
			review := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:authenticated"},
				ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: resource, Subresource: subresource},
			}}
			if err := k8sClient.Create(t.Context(), review); err != nil {
				t.Fatal(err)
			}
			return review.Status.Allowed
		})
	}

	t.Run("a viewer may not mint a token", func(t *testing.T) {
		cs := bind("viewer", "ClusterRole", "system:aggregate-to-view")
		allowed(t, "viewer", "get", "pods", "")
		if _, err := mint(cs); !apierrors.IsForbidden(err) {
			t.Fatalf("TokenRequest as a viewer: %v; want Forbidden", err)
		}
	})
	for _, tt := range []struct{ user, kind, role string }{
		{"editor", "ClusterRole", "system:aggregate-to-edit"},
		{"token-creator", "Role", tokensOnly.Name},
	} {
		t.Run("a holder of "+tt.role+" mints a token bound to the running pod, and it obtains the SVID", func(t *testing.T) {
			cs := bind(tt.user, tt.kind, tt.role)
			allowed(t, tt.user, "create", "serviceaccounts", "token")
			token, err := mint(cs)
			if err != nil {
				t.Fatalf("TokenRequest as %s: %v", tt.user, err)
			}
			if err := e.bootstrap(t, token); err != nil {
				t.Fatalf("bootstrap with the token of %s: %v; SECURITY.md says it succeeds", tt.user, err)
			}
		})
	}
}

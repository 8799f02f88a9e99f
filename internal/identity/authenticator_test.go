package identity

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// reviewCacheTTL is how long the API server keeps a successful token review.
const reviewCacheTTL = 10 * time.Second

func newAuthenticator(t *testing.T) *Authenticator {
	return NewAuthenticator(k8sClient, k8sClient, testr.New(t).WithName("tokenreview"))
}

// allowingUnbound is an Authenticator that lets tokens bound to no pod pass.
func allowingUnbound(t *testing.T) *Authenticator {
	return newAuthenticator(t).AllowUnbound(func() bool { return true })
}

// Tests that tokens the API server does not authenticate for the coxswain-discovery audience
// are refused as unauthenticated, without the token in the error.
func TestAuthenticateRefusesTokens(t *testing.T) {
	ns := newNamespace(t, "refused-tokens")
	newServiceAccount(t, ns, "proxy")
	tests := []struct {
		name  string
		token func(t *testing.T) string
	}{
		{"no token is refused", func(*testing.T) string { return "" }},
		{"a garbage token is refused", func(*testing.T) string { return "not-a-jwt" }},
		{"a token of another audience is refused", func(t *testing.T) string {
			return requestToken(t, ns, "proxy", []string{"some-other-audience"}, nil)
		}},
		{"a token of the API server's own audience is refused", func(t *testing.T) string {
			return requestToken(t, ns, "proxy", nil, nil)
		}},
	}
	a := newAuthenticator(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token := tt.token(t)
			p, err := a.Authenticate(t.Context(), token)
			if !errors.Is(err, bootstrap.ErrUnauthenticated) {
				t.Fatalf("Authenticate = %v, %v; want ErrUnauthenticated", p, err)
			}
			if token != "" && strings.Contains(err.Error(), token) {
				t.Fatalf("the error quotes the token: %v", err)
			}
		})
	}
}

// Tests that the token of a deleted ServiceAccount stops authenticating once the API server's
// review cache forgets it.
func TestAuthenticateRefusesDeletedServiceAccount(t *testing.T) {
	ns := newNamespace(t, "deleted-sa")
	sa := newServiceAccount(t, ns, "gone")
	token := requestToken(t, ns, sa.Name, []string{wellknown.TokenAudience}, nil)
	a := allowingUnbound(t)
	if _, err := a.Authenticate(t.Context(), token); err != nil {
		t.Fatalf("Authenticate before deletion: %v", err)
	}
	if err := k8sClient.Delete(t.Context(), sa); err != nil {
		t.Fatal(err)
	}
	var err error
	eventually(t, 3*reviewCacheTTL, "the token of a deleted ServiceAccount to be refused", func() bool {
		_, err = a.Authenticate(t.Context(), token)
		return err != nil
	})
	if !errors.Is(err, bootstrap.ErrUnauthenticated) {
		t.Fatalf("Authenticate = %v; want ErrUnauthenticated", err)
	}
}

// Tests that a token bound to a pod that was deleted, or replaced by another pod of the same
// name, is refused. Within the API server's review cache only our own pod check can see it; a
// review the API server already refuses counts as unauthenticated.
func TestAuthenticateRefusesStalePodBinding(t *testing.T) {
	ns := newNamespace(t, "stale-pod")
	newServiceAccount(t, ns, "proxy")
	tests := []struct {
		name    string
		replace bool
	}{
		{"a token of a deleted pod is refused", false},
		{"a token of a pod replaced under the same name is refused", true},
	}
	a := newAuthenticator(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := newPod(t, ns, "proxy-"+string(rune('a'+i)), "proxy")
			token := requestToken(t, ns, "proxy", []string{wellknown.TokenAudience}, pod)
			warmed := time.Now()
			if _, err := a.Authenticate(t.Context(), token); err != nil {
				t.Fatalf("Authenticate with the pod alive: %v", err)
			}
			deletePod(t, pod)
			if tt.replace {
				newPod(t, ns, pod.Name, "proxy")
			}
			_, err := a.Authenticate(t.Context(), token)
			requirePodRefusal(t, err, time.Since(warmed))
		})
	}
}

// requirePodRefusal wants ErrPodMismatch, or ErrUnauthenticated once the API server's cached
// review may have expired and its own binding check answered.
func requirePodRefusal(t *testing.T, err error, elapsed time.Duration) {
	t.Helper()
	switch {
	case errors.Is(err, bootstrap.ErrPodMismatch):
	case errors.Is(err, bootstrap.ErrUnauthenticated) && elapsed > reviewCacheTTL/2:
		t.Logf("the API server refused the review itself after %s: %v", elapsed, err)
	default:
		t.Fatalf("Authenticate = %v after %s; want ErrPodMismatch", err, elapsed)
	}
}

// Tests that valid tokens authenticate their ServiceAccount and bound pod.
func TestAuthenticateAcceptsTokens(t *testing.T) {
	newServiceAccount(t, wellknown.InstallNamespace, wellknown.SharedProxyServiceAccount)
	a := newAuthenticator(t)

	t.Run("an unbound token authenticates its ServiceAccount while unbound tokens are allowed", func(t *testing.T) {
		token := requestToken(t, wellknown.InstallNamespace, wellknown.SharedProxyServiceAccount, []string{wellknown.TokenAudience}, nil)
		p, err := allowingUnbound(t).Authenticate(t.Context(), token)
		want := bootstrap.Principal{Namespace: wellknown.InstallNamespace, ServiceAccount: wellknown.SharedProxyServiceAccount}
		if err != nil || p != want {
			t.Fatalf("Authenticate = %+v, %v; want %+v", p, err, want)
		}
	})
	t.Run("a pod-bound token authenticates its ServiceAccount and pod", func(t *testing.T) {
		pod := newPod(t, wellknown.InstallNamespace, "shared-proxy-0", wellknown.SharedProxyServiceAccount)
		token := requestToken(t, wellknown.InstallNamespace, wellknown.SharedProxyServiceAccount, []string{wellknown.TokenAudience}, pod)
		p, err := a.Authenticate(t.Context(), token)
		want := bootstrap.Principal{
			Namespace: wellknown.InstallNamespace, ServiceAccount: wellknown.SharedProxyServiceAccount,
			PodName: pod.Name, PodUID: string(pod.UID),
		}
		if err != nil || p != want {
			t.Fatalf("Authenticate = %+v, %v; want %+v", p, err, want)
		}
	})
}

package scopeauth

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/discovery/server/stream"
)

// Tests that a Gateway whose proxy ServiceAccount is not its own (a foreign ServiceAccount of
// that name, over which the provisioner refuses to provision) gets no dedicated identity: its
// scope is granted to no one and the ServiceAccount is not allowlisted; once the ServiceAccount
// is the Gateway's, both follow.
func TestAuthorityGrantsOnlyServiceAccountsTheGatewayControls(t *testing.T) {
	t.Parallel()
	a := New()
	owned := map[string]bool{"api-dedicated": true}
	a.RequireOwnership(func(_, name string, _ types.UID) bool { return owned[name] })
	var ids []ServiceAccount
	a.OnDedicatedIdentities(func(set []ServiceAccount) { ids = set })
	changes := 0
	a.OnChange(func() { changes++ })

	a.Update(build(t, world))
	if sa, err := a.ExpectedServiceAccount("prod", "web"); !errors.Is(err, stream.ErrUnknownGateway) {
		t.Fatalf("the Gateway of a foreign ServiceAccount belongs to %q, %v; want ErrUnknownGateway", sa, err)
	}
	if sa, err := a.ExpectedServiceAccount("prod", "api"); err != nil || sa != "api-dedicated" {
		t.Fatalf("the Gateway of its own ServiceAccount belongs to %q, %v; want api-dedicated", sa, err)
	}
	if want := []ServiceAccount{{Namespace: "prod", Name: "api-dedicated"}}; !cmp.Equal(ids, want) {
		t.Fatalf("allowlisted %v, want %v", ids, want)
	}

	owned["web-coxswain"] = true
	if !a.Update(build(t, world)) || changes != 1 {
		t.Fatalf("provisioning the ServiceAccount changed nothing (hooks run %d times)", changes)
	}
	if sa, err := a.ExpectedServiceAccount("prod", "web"); err != nil || sa != "web-coxswain" {
		t.Fatalf("after provisioning the Gateway belongs to %q, %v; want web-coxswain", sa, err)
	}
}

// Tests the provisioner's rule as the authority reads it: a ServiceAccount is a Gateway's when
// the Gateway is its controller.
func TestControlledBy(t *testing.T) {
	t.Parallel()
	ref := func(uid types.UID, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "gateway.networking.k8s.io/v1", Kind: "Gateway", Name: "web", UID: uid, Controller: ptr.To(controller)}
	}
	tests := []struct {
		name string
		refs []metav1.OwnerReference
		want bool
	}{
		{"a ServiceAccount the Gateway controls is its own", []metav1.OwnerReference{ref("gw-uid", true)}, true},
		{"a ServiceAccount without owner is foreign", nil, false},
		{"a ServiceAccount another Gateway controls is foreign", []metav1.OwnerReference{ref("other-uid", true)}, false},
		{"a ServiceAccount the Gateway owns without controlling is foreign", []metav1.OwnerReference{ref("gw-uid", false)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web-coxswain", OwnerReferences: tt.refs}}
			if got := controlledBy(sa, "gw-uid"); got != tt.want {
				t.Fatalf("controlledBy = %t, want %t", got, tt.want)
			}
		})
	}
}

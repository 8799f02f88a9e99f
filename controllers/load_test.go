package controllers

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/rebuild"
)

// Tests that reading the cluster state from the manager's informer stores gives what listing
// through the manager's client gives, object for object, without copying: the same object
// keeps its pointer from one read to the next until it changes, and an Opaque Secret is kept
// out either way.
func TestLoadFromInformerStoresMatchesList(t *testing.T) {
	t.Parallel()
	c := newGatewayClient(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "load-stores"}}
	objs := []client.Object{
		ns,
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "echo"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "tls"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: []byte("c"), corev1.TLSPrivateKeyKey: []byte("k")},
		},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "opaque"}, Data: map[string][]byte{"k": []byte("v")}},
		&gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "web"}},
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	mgr := runManager(t, ctrl.Options{Scheme: gatewayScheme, Cache: crcache.Options{ByObject: GatewayAPICacheOptions()}}, func(ctrl.Manager) error { return nil })
	route := types.NamespacedName{Namespace: ns.Name, Name: "web"}
	var fromStores, listed rebuild.Input
	eventually(t, "both reads to hold the objects", func() error {
		var err error
		if fromStores, err = rebuild.Load(ctx, mgr.GetCache()); err != nil {
			return err
		}
		if listed, err = rebuild.Load(ctx, mgr.GetClient()); err != nil {
			return err
		}
		if fromStores.State.HTTPRoutes[route] == nil || listed.State.HTTPRoutes[route] == nil ||
			len(fromStores.State.Secrets) == 0 || len(listed.State.Secrets) == 0 {
			return errNotYet
		}
		return nil
	})
	// Other tests run beside this one: compare this test's objects only.
	others := cmpopts.IgnoreMapEntries(func(k types.NamespacedName, _ any) bool { return k.Namespace != ns.Name && k.Name != ns.Name })
	if diff := cmp.Diff(listed.State, fromStores.State, others); diff != "" {
		t.Errorf("state from the informer stores differs from the listed one (-list +stores):\n%s", diff)
	}
	if _, ok := fromStores.State.Secrets[types.NamespacedName{Namespace: ns.Name, Name: "opaque"}]; ok {
		t.Error("an Opaque Secret entered the state")
	}
	if _, ok := fromStores.State.Secrets[types.NamespacedName{Namespace: ns.Name, Name: "tls"}]; !ok {
		t.Error("the TLS Secret is missing from the state")
	}
	again, err := rebuild.Load(ctx, mgr.GetCache())
	if err != nil {
		t.Fatal(err)
	}
	if again.State.HTTPRoutes[route] != fromStores.State.HTTPRoutes[route] {
		t.Error("an unchanged route was copied between two reads of the informer stores")
	}
	if listed.State.HTTPRoutes[route] == fromStores.State.HTTPRoutes[route] {
		t.Error("the listed route is the store's own object: the comparison above proves nothing")
	}
	var cur gwapiv1.HTTPRoute
	if err := c.Get(ctx, route, &cur); err != nil {
		t.Fatal(err)
	}
	cur.Labels = map[string]string{"changed": "yes"}
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the changed route to be read anew", func() error {
		in, err := rebuild.Load(ctx, mgr.GetCache())
		if err != nil {
			return err
		}
		if got := in.State.HTTPRoutes[route]; got == fromStores.State.HTTPRoutes[route] || got.Labels["changed"] != "yes" {
			return errNotYet
		}
		return nil
	})
}

var errNotYet = errors.New("not yet")

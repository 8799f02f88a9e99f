package trustbundle

import (
	"context"
	"sync"
	"testing"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/readiness"
)

// fakeSource is a bundle source tests swap.
type fakeSource struct {
	*tlsconfig.RotatingBundle
	changes chan struct{}
}

func (f *fakeSource) Subscribe() <-chan struct{} { return f.changes }

func (f *fakeSource) set(b *pki.Bundle) {
	f.Set(b)
	f.changes <- struct{}{}
}

func getCM(t *testing.T, ns string) (*corev1.ConfigMap, error) {
	t.Helper()
	return clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), wellknown.TrustBundleConfigMapName, metav1.GetOptions{})
}

func ownerIn(ns string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "gateway.networking.k8s.io/v1", Kind: "Gateway", Name: "gw", UID: types.UID("uid-gw-" + ns)}
}

// Tests that copies are made with their owner, follow the bundle, leave with their namespace,
// and never replace a ConfigMap Coxswain does not manage.
func TestReplicator(t *testing.T) {
	a, b, foreign := newNamespace(t, "copy-a"), newNamespace(t, "copy-b"), newNamespace(t, "copy-foreign")
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: foreign, Name: wellknown.TrustBundleConfigMapName}, Data: map[string]string{"ca.crt": "theirs"}}
	if _, err := clientset.CoreV1().ConfigMaps(foreign).Create(t.Context(), theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := pkitest.Bundle(pkitest.NewCA(t, wellknown.DefaultTrustDomain))
	src := &fakeSource{RotatingBundle: tlsconfig.NewRotatingBundle(first), changes: make(chan struct{}, 1)}
	r := NewReplicator(clientset, src, testr.New(t))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Start(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	err := r.Sync(t.Context(), []Target{{Namespace: a, Owner: ownerIn(a)}, {Namespace: b, Owner: ownerIn(b)}, {Namespace: foreign, Owner: ownerIn(foreign)}})
	if err == nil {
		t.Fatal("Sync overwrote a ConfigMap Coxswain does not manage without an error")
	}
	if cm, _ := getCM(t, foreign); cm.Data["ca.crt"] != "theirs" {
		t.Fatal("a foreign ConfigMap was overwritten")
	}
	for _, ns := range []string{a, b} {
		cm, err := getCM(t, ns)
		if err != nil || cm.Data[wellknown.TrustBundleKey] != string(first.PEM()) {
			t.Fatalf("copy in %s: %v", ns, err)
		}
		if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != ownerIn(ns).UID {
			t.Errorf("copy in %s owned by %v, want the Gateway", ns, cm.OwnerReferences)
		}
	}

	second := pkitest.Bundle(pkitest.NewCA(t, wellknown.DefaultTrustDomain), pkitest.NewCA(t, wellknown.DefaultTrustDomain))
	src.set(second)
	eventually(t, "the copies to follow the bundle", func() bool {
		ca, errA := getCM(t, a)
		cb, errB := getCM(t, b)
		return errA == nil && errB == nil && ca.Data[wellknown.TrustBundleKey] == string(second.PEM()) && cb.Data[wellknown.TrustBundleKey] == string(second.PEM())
	})

	if err := r.Sync(t.Context(), []Target{{Namespace: a, Owner: ownerIn(a)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := getCM(t, b); !apierrors.IsNotFound(err) {
		t.Fatalf("the copy of a namespace left out remains: %v", err)
	}
	if cm, _ := getCM(t, foreign); cm == nil || cm.Data["ca.crt"] != "theirs" {
		t.Fatal("a foreign ConfigMap was deleted")
	}
}

// Tests that the publisher writes only when the roots change and reports the condition.
func TestPublisherWritesOnlyChanges(t *testing.T) {
	ns := newNamespace(t, "publish")
	board := readiness.NewBoard(v1alpha1.ConditionTrustBundlePublished)
	p := NewPublisher(clientset, ns, board, testr.New(t))
	if err := p.Publish(t.Context(), nil); err == nil {
		t.Fatal("an empty bundle was published")
	}
	bundle := pkitest.Bundle(pkitest.NewCA(t, wellknown.DefaultTrustDomain))
	if err := p.Publish(t.Context(), bundle); err != nil {
		t.Fatal(err)
	}
	before, err := getCM(t, ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(t.Context(), bundle); err != nil {
		t.Fatal(err)
	}
	after, _ := getCM(t, ns)
	if after.ResourceVersion != before.ResourceVersion {
		t.Fatal("publishing the same roots wrote the ConfigMap again")
	}
	if ok, c := board.AllTrue(); !ok {
		t.Fatalf("TrustBundlePublished is %s %s", c.Status, c.Reason)
	}
}

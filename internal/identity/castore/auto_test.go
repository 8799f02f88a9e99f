package castore

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/wellknown"
)

func getSecret(t *testing.T, ns string) *corev1.Secret {
	t.Helper()
	s, err := clientset.CoreV1().Secrets(ns).Get(t.Context(), wellknown.CASecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get CA Secret: %v", err)
	}
	return s
}

// Tests that a corrupt Auto mode Secret fails closed and is not overwritten.
func TestAutoCorruptSecretFailsClosed(t *testing.T) {
	ns := newNamespace(t, "auto-corrupt")
	createSecret(t, certManagerSecret(ns, []byte("garbage"), []byte("garbage")))
	h := startStore(t, ns)
	h.waitReason(t, metav1.ConditionFalse, ReasonCASecretInvalid)
	waitEvent(t, ns, ReasonCASecretInvalid)
	if got := getSecret(t, ns).Data["tls.crt"]; string(got) != "garbage" {
		t.Fatal("Auto mode overwrote a Secret it could not read")
	}
}

// Tests that Auto mode creates a kubernetes.io/tls Secret holding an ECDSA P-256 CA for the
// trust domain, signs with it and publishes its root.
func TestAutoCreatesSecret(t *testing.T) {
	ns := newNamespace(t, "auto-create")
	h := startStore(t, ns)
	ca := h.waitCA(t)
	h.waitReason(t, metav1.ConditionTrue, ReasonCALoaded)

	secret := getSecret(t, ns)
	if secret.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret type %s, want %s", secret.Type, corev1.SecretTypeTLS)
	}
	stored, err := pki.ParseCA(secret.Data["tls.crt"], secret.Data["tls.key"])
	if err != nil {
		t.Fatalf("the Secret holds no CA: %v", err)
	}
	if !sameCA(stored, ca) {
		t.Fatal("the store signs with another CA than the Secret's")
	}
	if k, ok := ca.Signer().Public().(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("CA key %T, want ECDSA P-256", ca.Signer().Public())
	}
	if got := ca.Certificate().PermittedURIDomains; len(got) != 1 || got[0] != wellknown.DefaultTrustDomain {
		t.Errorf("CA name constraints %q, want [%s]", got, wellknown.DefaultTrustDomain)
	}
	if life := time.Until(ca.Certificate().NotAfter); life > DefaultCALifetime || life < DefaultCALifetime-time.Hour {
		t.Errorf("CA lives %s, want about %s", life, DefaultCALifetime)
	}
	waitPublished(t, ns, pki.NewBundle(ca.Certificate()))
}

// Tests that replicas starting together end with the one CA the first of them stored.
func TestAutoReplicasAgree(t *testing.T) {
	ns := newNamespace(t, "auto-race")
	replicas := []*harness{startStore(t, ns), startStore(t, ns), startStore(t, ns)}
	first := replicas[0].waitCA(t)
	for i, h := range replicas[1:] {
		if ca := h.waitCA(t); !sameCA(ca, first) {
			t.Fatalf("replica %d signs with another CA", i+1)
		}
	}
	stored, err := pki.ParseCA(getSecret(t, ns).Data["tls.crt"], getSecret(t, ns).Data["tls.key"])
	if err != nil || !sameCA(stored, first) {
		t.Fatalf("the Secret holds another CA (%v)", err)
	}
}

// Tests that a deleted Auto mode Secret is written back with the same CA, so issued SVIDs stay
// valid.
func TestAutoRecreatesDeletedSecret(t *testing.T) {
	ns := newNamespace(t, "auto-deleted")
	h := startStore(t, ns)
	ca := h.waitCA(t)
	if err := clientset.CoreV1().Secrets(ns).Delete(t.Context(), wellknown.CASecretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, "the Secret to come back", func() bool {
		s, err := clientset.CoreV1().Secrets(ns).Get(t.Context(), wellknown.CASecretName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		stored, err := pki.ParseCA(s.Data["tls.crt"], s.Data["tls.key"])
		return err == nil && sameCA(stored, ca)
	})
}

// Tests the whole Auto mode rotation on an injected clock: a successor is published before it
// signs, the old root stays trusted until the last SVID it signed has expired, and a restarted
// replica remembers it.
func TestAutoRotationOverlap(t *testing.T) {
	ns := newNamespace(t, "auto-rotate")
	const lifetime, ttl = 30 * time.Hour, time.Hour
	clk := clocktesting.NewFakeClock(time.Now())
	h := startStore(t, ns, withClock(clk), withLifetime(lifetime), withSVIDTTL(ttl))
	oldCA := h.waitCA(t)

	// Two thirds into the CA's life a successor is published but does not sign yet.
	clk.SetTime(rotationDue(oldCA).Add(time.Second))
	var bundle *pki.Bundle
	h.afterClockMove(t, "a published successor", func() bool {
		bundle, _ = h.store.Bundle()
		return bundle != nil && bundle.Len() == 2
	})
	if ca := h.waitCA(t); !sameCA(ca, oldCA) {
		t.Fatal("the successor signs before its overlap ended")
	}
	waitPublished(t, ns, bundle)
	lastOldSVID := signSVID(t, oldCA, clk.Now())

	// One SVID lifetime later the successor signs; the old root stays for the old SVIDs.
	clk.Step(ttl)
	var newCA *pki.CA
	h.afterClockMove(t, "the successor to sign", func() bool {
		newCA, _, _ = h.store.Current()
		return newCA != nil && !sameCA(newCA, oldCA)
	})
	bundle, _ = h.store.Bundle()
	if !bundle.Contains(oldCA.Certificate()) || !bundle.Contains(newCA.Certificate()) || bundle.Len() != 2 {
		t.Fatalf("bundle after promotion holds %d roots; want the old and the new", bundle.Len())
	}
	verifies(t, bundle, lastOldSVID, clk.Now())
	waitPublished(t, ns, bundle)

	// A replica started now reads the retired root from the Secret.
	restarted := startStore(t, ns, withClock(clk), withLifetime(lifetime), withSVIDTTL(ttl))
	eventually(t, wait, "the restarted replica's bundle", func() bool {
		b, err := restarted.store.Bundle()
		return err == nil && b.Equal(bundle)
	})

	// Once every SVID of the old root has expired, it leaves the bundle.
	clk.Step(ttl + leafSlack + time.Second)
	h.afterClockMove(t, "the old root to leave the bundle", func() bool {
		b, _ := h.store.Bundle()
		return b != nil && b.Len() == 1 && b.Contains(newCA.Certificate())
	})
	waitPublished(t, ns, pki.NewBundle(newCA.Certificate()))
}

// Tests that after the SVID lifetime is lowered the successor CA is still published for the
// longest lifetime an SVID of the old root may have, so no proxy meets the new root before it
// renewed its bundle.
func TestAutoSuccessorOverlapCoversTheLongestSVIDLifetime(t *testing.T) {
	ns := newNamespace(t, "auto-ttl-lowered")
	const lifetime, longTTL, shortTTL = 30 * time.Hour, 4 * time.Hour, time.Hour
	clk := clocktesting.NewFakeClock(time.Now())
	h := startStore(t, ns, withClock(clk), withLifetime(lifetime), withSVIDTTL(longTTL))
	oldCA := h.waitCA(t)
	lowered := h.set.Get()
	lowered.SVIDTTL = shortTTL
	h.set.Set(lowered)

	clk.SetTime(rotationDue(oldCA).Add(time.Second))
	h.afterClockMove(t, "a published successor", func() bool {
		b, _ := h.store.Bundle()
		return b != nil && b.Len() == 2
	})
	h.store.mu.RLock()
	activeAt := h.store.nextActiveAt
	h.store.mu.RUnlock()
	if overlap := activeAt.Sub(clk.Now()); overlap < longTTL-time.Second {
		t.Fatalf("the successor signs %s after its publication; SVIDs of the old root live %s", overlap, longTTL)
	}
}

// Tests the incident response for a compromised Auto mode root: listing it in
// discovery.ca.distrustedRoots takes it out of the bundle and fails closed at once, and deleting
// the Secret then brings a fresh CA that alone is trusted.
func TestAutoDistrustedRootFailsClosedUntilReplaced(t *testing.T) {
	ns := newNamespace(t, "auto-distrust")
	h := startStore(t, ns)
	compromised := h.waitCA(t)
	st := h.set.Get()
	st.DistrustedRoots = []string{Fingerprint(compromised)}
	h.set.Set(st)
	eventually(t, wait, "the store to fail closed", func() bool {
		_, _, err := h.store.Current()
		return errors.Is(err, ErrCADistrusted)
	})
	if b, err := h.store.Bundle(); err == nil && b.Contains(compromised.Certificate()) {
		t.Fatal("the distrusted root is still in the bundle")
	}
	if c := h.condition(); c.Status != metav1.ConditionFalse || c.Reason != ReasonCADistrusted {
		t.Fatalf("CAReady = %s %s, want False %s", c.Status, c.Reason, ReasonCADistrusted)
	}

	if err := clientset.CoreV1().Secrets(ns).Delete(t.Context(), wellknown.CASecretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var fresh *pki.CA
	eventually(t, wait, "a fresh CA", func() bool {
		ca, _, err := h.store.Current()
		fresh = ca
		return err == nil && !sameCA(ca, compromised)
	})
	b, err := h.store.Bundle()
	if err != nil || b.Len() != 1 || !b.Contains(fresh.Certificate()) {
		t.Fatalf("bundle after the replacement: %v, %v; want only the fresh root", b, err)
	}
}

// Tests that a replica restarted after the SVID lifetime was lowered still publishes the
// successor for the longest lifetime an SVID of the signing root may have: the longest lifetime
// seen is kept in the CA Secret, not only in memory.
func TestAutoSuccessorOverlapSurvivesRestart(t *testing.T) {
	ns := newNamespace(t, "auto-ttl-restart")
	const lifetime, longTTL, shortTTL = 30 * time.Hour, 4 * time.Hour, time.Hour
	clk := clocktesting.NewFakeClock(time.Now())
	first := startStore(t, ns, withClock(clk), withLifetime(lifetime), withSVIDTTL(longTTL))
	oldCA := first.waitCA(t)
	eventually(t, wait, "the longest SVID lifetime in the Secret", func() bool {
		return getSecret(t, ns).Annotations[annMaxSVIDTTL] == longTTL.String()
	})
	first.stop()

	h := startStore(t, ns, withClock(clk), withLifetime(lifetime), withSVIDTTL(shortTTL))
	if ca := h.waitCA(t); !sameCA(ca, oldCA) {
		t.Fatal("the restarted replica signs with another CA")
	}
	clk.SetTime(rotationDue(oldCA).Add(time.Second))
	h.afterClockMove(t, "a published successor", func() bool {
		b, _ := h.store.Bundle()
		return b != nil && b.Len() == 2
	})
	h.store.mu.RLock()
	activeAt := h.store.nextActiveAt
	h.store.mu.RUnlock()
	if overlap := activeAt.Sub(clk.Now()); overlap < longTTL-time.Second {
		t.Fatalf("after a restart the successor signs %s after its publication; SVIDs of the old root live %s", overlap, longTTL)
	}
}

// Tests that a distrusted successor is never promoted: it leaves the bundle and the Secret, a
// fresh successor is prepared in its place, and at the distrusted one's activation time the
// signing CA keeps signing instead of the store failing closed.
func TestAutoDistrustedSuccessorIsReplaced(t *testing.T) {
	ns := newNamespace(t, "auto-distrust-next")
	const lifetime, ttl = 30 * time.Hour, time.Hour
	clk := clocktesting.NewFakeClock(time.Now())
	h := startStore(t, ns, withClock(clk), withLifetime(lifetime), withSVIDTTL(ttl))
	signing := h.waitCA(t)
	clk.SetTime(rotationDue(signing).Add(time.Second))
	var distrustedNext *pki.CA
	h.afterClockMove(t, "a prepared successor", func() bool {
		h.store.mu.RLock()
		defer h.store.mu.RUnlock()
		distrustedNext = h.store.next
		return distrustedNext != nil
	})

	st := h.set.Get()
	st.DistrustedRoots = []string{Fingerprint(distrustedNext)}
	h.set.Set(st)
	var fresh *pki.CA
	h.afterClockMove(t, "a fresh successor in the Secret", func() bool {
		c, err := decodeAuto(getSecret(t, ns))
		if err != nil || c.next == nil || sameCA(c.next, distrustedNext) {
			return false
		}
		fresh = c.next
		return true
	})
	b, err := h.store.Bundle()
	if err != nil || b.Contains(distrustedNext.Certificate()) {
		t.Fatalf("bundle %v, %v still holds the distrusted successor", b, err)
	}

	clk.Step(ttl + time.Second)
	h.afterClockMove(t, "the fresh successor to sign", func() bool {
		ca, _, err := h.store.Current()
		return err == nil && sameCA(ca, fresh)
	})
	if c := h.condition(); c.Status != metav1.ConditionTrue {
		t.Fatalf("CAReady = %s %s, want True", c.Status, c.Reason)
	}
	b, _ = h.store.Bundle()
	if b.Contains(distrustedNext.Certificate()) || !b.Contains(signing.Certificate()) {
		t.Fatal("after the promotion the bundle holds the distrusted successor, or lacks the retired root")
	}
}

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// proxyRecoversFromADistrustedRoot distrusts the signing root (incident response), deletes the
// CA Secret so that a fresh CA is generated, and refreshes the proxy's mounted bundle as the
// kubelet would: the shared proxy, whose SVID of the old root is hours from renewal, must be
// Ready again within a minute, having bootstrapped again by itself.
func (s *suite) proxyRecoversFromADistrustedRoot(t *testing.T) {
	ctx := t.Context()
	old := s.caCertificate(ctx, t)
	sum := sha256.Sum256(old.Raw)
	key := types.NamespacedName{Namespace: wellknown.InstallNamespace, Name: "coxswain"}
	var config v1alpha1.CoxswainConfig
	if err := s.cluster.Client.Get(ctx, key, &config); err != nil {
		t.Fatal(err)
	}
	if config.Spec.Discovery == nil {
		config.Spec.Discovery = &v1alpha1.DiscoverySpec{}
	}
	if config.Spec.Discovery.CA == nil {
		config.Spec.Discovery.CA = &v1alpha1.CASpec{}
	}
	config.Spec.Discovery.CA.DistrustedRoots = []string{hex.EncodeToString(sum[:])}
	if err := s.cluster.Client.Update(ctx, &config); err != nil {
		t.Fatal(err)
	}
	if err := Poll(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		if err := s.cluster.Client.Get(ctx, key, &config); err != nil {
			return err
		}
		c := meta.FindStatusCondition(config.Status.Conditions, v1alpha1.ConditionCAReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "CADistrusted" {
			return fmt.Errorf("CoxswainConfig conditions %s", conditionsString(config.Status.Conditions))
		}
		return nil
	}); err != nil {
		t.Fatalf("the operator did not fail closed on the distrusted root: %v", err)
	}

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: wellknown.InstallNamespace, Name: wellknown.CASecretName}}
	if err := s.cluster.Client.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	var bundle []byte
	if err := Poll(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		b, err := s.cluster.TrustBundle(ctx, wellknown.InstallNamespace)
		if err != nil {
			return err
		}
		if bundleHolds(b, old) || len(parseCertificates(b)) == 0 {
			return errors.New("the trust bundle still holds the distrusted root")
		}
		bundle = b
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.writeFile(t, "trust-bundle.pem", bundle) // the kubelet's refresh of the mounted ConfigMap
	start := time.Now()
	if err := s.shared.waitState(ctx, 60*time.Second, "Ready"); err != nil {
		t.Fatalf("the shared proxy did not recover from the CA switch: %v", err)
	}
	t.Logf("shared proxy Ready %s after the new bundle was mounted", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(s.shared.Log(), "bootstrapping again") {
		t.Errorf("the shared proxy recovered without bootstrapping again")
	}
}

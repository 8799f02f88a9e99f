package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// operatorBecomesReady starts the operator in Auto mode against a CoxswainConfig without
// settings, so the flags decide them, and checks what Auto mode promises: a CA Secret, a
// trust bundle holding its root, both listeners, and Ready.
func (s *suite) operatorBecomesReady(t *testing.T) {
	ctx := t.Context()
	if err := s.cluster.EnsureNamespace(ctx, wellknown.InstallNamespace); err != nil {
		t.Fatal(err)
	}
	// No load balancer controller runs here: the Services that give Gateways their addresses
	// are ClusterIP ones.
	config := &v1alpha1.CoxswainConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: wellknown.InstallNamespace, Name: "coxswain"},
		Spec:       v1alpha1.CoxswainConfigSpec{Proxy: &v1alpha1.ProxyDefaults{ServiceType: ptr.To(corev1.ServiceTypeClusterIP)}},
	}
	if err := s.cluster.Client.Create(ctx, config); err != nil {
		t.Fatal(err)
	}
	s.operator = s.startOperator(t, wellknown.DefaultSVIDTTL)

	err := Poll(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		if err := s.operator.Ended(); err != nil {
			return err
		}
		if err := s.cluster.Client.Get(ctx, types.NamespacedName{Namespace: config.Namespace, Name: config.Name}, config); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(config.Status.Conditions, v1alpha1.ConditionReady) {
			return fmt.Errorf("CoxswainConfig conditions %s", conditionsString(config.Status.Conditions))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("CoxswainConfig never became Ready: %v", err)
	}

	ca := s.caCertificate(ctx, t)
	bundle, err := s.cluster.TrustBundle(ctx, wellknown.InstallNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if !bundleHolds(bundle, ca) {
		t.Fatalf("trust bundle does not hold the CA certificate %q", ca.Subject)
	}
	s.bundle = s.writeFile(t, "trust-bundle.pem", bundle)

	for _, port := range []int{wellknown.StreamPort, wellknown.BootstrapPort} {
		conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", loopback(port))
		if err != nil {
			t.Fatalf("discovery listener on port %d: %v", port, err)
		}
		_ = conn.Close()
	}
}

// caCertificate returns the certificate of the CA Secret after checking its keys.
func (s *suite) caCertificate(ctx context.Context, t *testing.T) *x509.Certificate {
	t.Helper()
	var secret corev1.Secret
	key := types.NamespacedName{Namespace: wellknown.InstallNamespace, Name: wellknown.CASecretName}
	if err := s.cluster.Client.Get(ctx, key, &secret); err != nil {
		t.Fatalf("CA Secret: %v", err)
	}
	if len(secret.Data[corev1.TLSPrivateKeyKey]) == 0 {
		t.Fatalf("CA Secret %s has no %s", key, corev1.TLSPrivateKeyKey)
	}
	certs := parseCertificates(secret.Data[corev1.TLSCertKey])
	if len(certs) == 0 || !certs[0].IsCA {
		t.Fatalf("CA Secret %s holds no CA certificate in %s", key, corev1.TLSCertKey)
	}
	return certs[0]
}

func parseCertificates(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out
		}
		if cert, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, cert)
		}
	}
}

func bundleHolds(bundle []byte, cert *x509.Certificate) bool {
	for _, c := range parseCertificates(bundle) {
		if c.Equal(cert) {
			return true
		}
	}
	return false
}

func conditionsString(conds []metav1.Condition) string {
	if len(conds) == 0 {
		return "(none)"
	}
	parts := make([]string, 0, len(conds))
	for _, c := range conds {
		parts = append(parts, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(parts, ", ")
}

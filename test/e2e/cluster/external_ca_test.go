package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/test/e2e"
)

// absentFor is how long the suite checks that nothing serves discovery without the Secret.
const absentFor = 5 * time.Second

// TestExternalCA needs the operator deployed with config/overlays/external-ca and no CA Secret
// (`make test-e2e` runs it on a second cluster with that overlay): no controller replica may
// serve discovery, turn Ready or publish a trust bundle, and the shared pool stays NotReady,
// until the Secret appears; then the controller loads it, publishes it and the pool turns Ready.
func TestExternalCA(t *testing.T) {
	s := newSuite(t)
	ctx := t.Context()
	var d appsv1.Deployment
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: wellknown.InstallNamespace, Name: controllerName}, &d); err != nil {
		t.Fatal(err)
	}
	mode, secret := caSettings(&d)
	if !strings.EqualFold(mode, string(v1alpha1.CAModeExternal)) {
		t.Skipf("the operator runs in CA mode %q: this test needs the external-ca overlay (make test-e2e runs it on a cluster of its own)", mode)
	}
	start := time.Now()
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: wellknown.InstallNamespace, Name: secret}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("CA Secret %s: %v; want it absent at the start", secret, err)
	}
	cfg := &v1alpha1.CoxswainConfig{ObjectMeta: metav1.ObjectMeta{Namespace: wellknown.InstallNamespace, Name: configName}}
	if err := s.ensure(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := e2e.Poll(ctx, 2*time.Minute, 250*time.Millisecond, s.controllersRunning); err != nil {
		t.Fatal(err)
	}
	if err := e2e.Poll(ctx, time.Minute, 250*time.Millisecond, s.caCondition(metav1.ConditionFalse)); err != nil {
		t.Error(err)
	}
	if err := e2e.Poll(ctx, time.Minute, 250*time.Millisecond, func(ctx context.Context) error {
		return s.warningEvent(ctx, wellknown.InstallNamespace, "CASecretNotFound", secret)
	}); err != nil {
		t.Error(err)
	}
	if err := e2e.Hold(ctx, absentFor, 250*time.Millisecond, s.servesNoDiscovery); err != nil {
		t.Fatalf("without the CA Secret: %v", err)
	}
	t.Logf("No discovery for %s without the CA Secret", absentFor)

	caPEM, keyPEM, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: wellknown.InstallNamespace, Name: secret},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: caPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	if err := e2e.Poll(ctx, 2*time.Minute, 250*time.Millisecond, s.controllerAvailable(replicas)); err != nil {
		t.Fatalf("after the CA Secret appeared: %v", err)
	}
	t.Logf("Controller Ready %s after the CA Secret appeared", time.Since(created).Round(100*time.Millisecond))
	if err := e2e.Poll(ctx, time.Minute, 250*time.Millisecond, s.caCondition(metav1.ConditionTrue)); err != nil {
		t.Error(err)
	}
	if err := e2e.Poll(ctx, time.Minute, 250*time.Millisecond, func(ctx context.Context) error {
		var cm corev1.ConfigMap
		if err := s.client.Get(ctx, client.ObjectKey{Namespace: wellknown.InstallNamespace, Name: wellknown.TrustBundleConfigMapName}, &cm); err != nil {
			return err
		}
		if !strings.Contains(cm.Data[wellknown.TrustBundleKey], strings.TrimSpace(string(caPEM))) {
			return fmt.Errorf("trust bundle does not hold the CA of the Secret")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	// Pods of the pool may have been restarted meanwhile: take the current ones.
	if err := e2e.Poll(ctx, 3*time.Minute, 250*time.Millisecond, func(ctx context.Context) error {
		pods, err := s.pods(ctx, client.InNamespace(wellknown.InstallNamespace), sharedPoolLabels)
		if err != nil {
			return err
		}
		if len(pods) == 0 {
			return fmt.Errorf("no shared proxy pod")
		}
		for i := range pods {
			if err := isReady(&pods[i])(ctx); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("shared pool after the CA Secret appeared: %v", err)
	}
	t.Logf("Shared pool Ready %s after the CA Secret appeared; test took %s",
		time.Since(created).Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}

// caSettings returns the CA mode and Secret name the controller's environment sets.
func caSettings(d *appsv1.Deployment) (mode, secret string) {
	mode, secret = string(v1alpha1.CAModeAuto), wellknown.CASecretName
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			switch e.Name {
			case "COXSWAIN_DISCOVERY_CA_MODE":
				mode = e.Value
			case "COXSWAIN_DISCOVERY_CA_SECRET":
				secret = e.Value
			}
		}
	}
	return mode, secret
}

// controllersRunning returns nil once the controller pods have addresses.
func (s *suite) controllersRunning(ctx context.Context) error {
	pods, err := s.pods(ctx, client.InNamespace(wellknown.InstallNamespace), controllerLabels)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		return fmt.Errorf("no controller pod with an address")
	}
	return nil
}

// servesNoDiscovery returns nil while no controller pod is Ready or accepts a connection on
// the discovery ports, no trust bundle is published and no shared proxy pod is Ready.
func (s *suite) servesNoDiscovery(ctx context.Context) error {
	pods, err := s.pods(ctx, client.InNamespace(wellknown.InstallNamespace), controllerLabels)
	if err != nil {
		return err
	}
	for i := range pods {
		p := &pods[i]
		if podReady(p) == corev1.ConditionTrue {
			return fmt.Errorf("controller pod %s is Ready without a CA", p.Name)
		}
		for _, port := range []string{"50051", "50052"} {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.Status.PodIP, port))
			if err == nil {
				_ = c.Close()
				return fmt.Errorf("controller pod %s accepts connections on port %s without a CA", p.Name, port)
			}
		}
	}
	err = s.client.Get(ctx, client.ObjectKey{Namespace: wellknown.InstallNamespace, Name: wellknown.TrustBundleConfigMapName}, &corev1.ConfigMap{})
	switch {
	case err == nil:
		return fmt.Errorf("trust bundle ConfigMap %s published without a CA", wellknown.TrustBundleConfigMapName)
	case !apierrors.IsNotFound(err):
		return err
	}
	// They cannot bootstrap, and without the trust bundle they may not even start: ask the API.
	shared, err := s.pods(ctx, client.InNamespace(wellknown.InstallNamespace), sharedPoolLabels)
	if err != nil {
		return err
	}
	for i := range shared {
		if podReady(&shared[i]) == corev1.ConditionTrue {
			return fmt.Errorf("shared proxy pod %s is Ready without a CA", shared[i].Name)
		}
	}
	return nil
}

// caCondition returns nil once the CoxswainConfig's CAReady condition has status want.
func (s *suite) caCondition(want metav1.ConditionStatus) func(context.Context) error {
	return func(ctx context.Context) error {
		var cfg v1alpha1.CoxswainConfig
		if err := s.client.Get(ctx, client.ObjectKey{Namespace: wellknown.InstallNamespace, Name: configName}, &cfg); err != nil {
			return err
		}
		c := condition(cfg.Status.Conditions, v1alpha1.ConditionCAReady)
		if c == nil || c.Status != want {
			return fmt.Errorf("CoxswainConfig conditions %s, want CAReady %s", conditions(cfg.Status.Conditions), want)
		}
		return nil
	}
}

// newCA returns a self-signed ECDSA P-256 CA certificate and its SEC1 key, in PEM, as
// `kubectl create secret tls` would be given them.
func newCA() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		Subject:               pkix.Name{CommonName: "coxswain e2e external CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

package castore

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// keyEncoding is how a test CA's key is written into tls.key.
type keyEncoding string

const (
	pkcs1 keyEncoding = "RSA PRIVATE KEY"
	sec1  keyEncoding = "EC PRIVATE KEY"
	pkcs8 keyEncoding = "PRIVATE KEY"
)

// selfSignedCA makes a CA the way cert-manager's SelfSigned issuer does: isCA, no name
// constraints, valid from an hour ago for notAfter.
func selfSignedCA(t *testing.T, key crypto.Signer, notAfter time.Duration, mutate ...func(*x509.Certificate)) (certPEM []byte) {
	t.Helper()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: "coxswain-discovery-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(notAfter),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	for _, m := range mutate {
		m(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(t *testing.T, key crypto.Signer, enc keyEncoding) []byte {
	t.Helper()
	var der []byte
	var err error
	switch enc {
	case pkcs1:
		der = x509.MarshalPKCS1PrivateKey(key.(*rsa.PrivateKey))
	case sec1:
		der, err = x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
	default:
		der, err = x509.MarshalPKCS8PrivateKey(key)
	}
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: string(enc), Bytes: der})
}

func rsaKey(t *testing.T) crypto.Signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ecKey(t *testing.T) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// certManagerSecret is a Secret in exactly the shape cert-manager writes for a CA Certificate.
func certManagerSecret(namespace string, certPEM, keyPEM []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: wellknown.CASecretName,
			Annotations: map[string]string{
				"cert-manager.io/certificate-name": wellknown.CASecretName,
				"cert-manager.io/issuer-kind":      "Issuer",
				"cert-manager.io/issuer-name":      "coxswain-discovery-selfsigned",
			},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": certPEM},
	}
}

func createSecret(t *testing.T, s *corev1.Secret) *corev1.Secret {
	t.Helper()
	out, err := clientset.CoreV1().Secrets(s.Namespace).Create(t.Context(), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Secret: %v", err)
	}
	return out
}

func updateSecret(t *testing.T, s *corev1.Secret) {
	t.Helper()
	if _, err := clientset.CoreV1().Secrets(s.Namespace).Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update Secret: %v", err)
	}
}

// Tests that External mode without its Secret fails closed, never self-signs, says why, and
// picks the Secret up without a restart once it appears.
func TestExternalAbsentFailsClosedThenLoads(t *testing.T) {
	ns := newNamespace(t, "external-absent")
	h := startStore(t, ns, external())

	h.waitReason(t, metav1.ConditionFalse, ReasonCASecretNotFound)
	if _, _, err := h.store.Current(); !errors.Is(err, ErrCASecretNotFound) {
		t.Fatalf("Current = %v; want ErrCASecretNotFound", err)
	}
	ev := waitEvent(t, ns, ReasonCASecretNotFound)
	if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "Secret" || ev.InvolvedObject.Name != wellknown.CASecretName {
		t.Errorf("event %s about %s/%s; want a Warning about the CA Secret", ev.Type, ev.InvolvedObject.Kind, ev.InvolvedObject.Name)
	}
	if _, err := clientset.CoreV1().Secrets(ns).Get(t.Context(), wellknown.CASecretName, metav1.GetOptions{}); err == nil {
		t.Fatal("External mode created the CA Secret")
	}
	if _, ok := publishedBundle(t, ns); ok {
		t.Fatal("a trust bundle was published without a CA")
	}

	key := ecKey(t)
	certPEM := selfSignedCA(t, key, 24*time.Hour)
	createSecret(t, certManagerSecret(ns, certPEM, encodeKey(t, key, pkcs8)))
	ca := h.waitCA(t)
	h.waitReason(t, metav1.ConditionTrue, ReasonCALoaded)
	if got := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate().Raw}); string(got) != string(certPEM) {
		t.Fatal("the store signs with another CA than the Secret's")
	}
	waitPublished(t, ns, pki.NewBundle(ca.Certificate()))
}

// Tests that the Secret shapes cert-manager and operators write load in External mode.
func TestExternalLoadsCertManagerSecrets(t *testing.T) {
	tests := []struct {
		name string
		key  func(*testing.T) crypto.Signer
		enc  keyEncoding
		typ  corev1.SecretType
	}{
		{"a kubernetes.io/tls Secret with a PKCS#1 RSA key loads", rsaKey, pkcs1, corev1.SecretTypeTLS},
		{"a kubernetes.io/tls Secret with a PKCS#8 EC key loads", ecKey, pkcs8, corev1.SecretTypeTLS},
		{"a kubernetes.io/tls Secret with a SEC1 EC key loads", ecKey, sec1, corev1.SecretTypeTLS},
		{"an Opaque Secret with a PKCS#8 RSA key loads", rsaKey, pkcs8, corev1.SecretTypeOpaque},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNamespace(t, "external-shape-"+string(rune('a'+i)))
			key := tt.key(t)
			s := certManagerSecret(ns, selfSignedCA(t, key, 24*time.Hour), encodeKey(t, key, tt.enc))
			s.Type = tt.typ
			createSecret(t, s)
			h := startStore(t, ns, external())
			h.waitCA(t)
			h.waitReason(t, metav1.ConditionTrue, ReasonCALoaded)
		})
	}
}

// Tests that Secrets holding no usable CA fail closed with CASecretInvalid.
func TestExternalInvalidSecretFailsClosed(t *testing.T) {
	ec := ecKey(t)
	good := selfSignedCA(t, ec, 24*time.Hour)
	goodKey := encodeKey(t, ec, pkcs8)
	tests := []struct {
		name   string
		secret func(*testing.T, string) *corev1.Secret
	}{
		{"a certificate that is not PEM fails closed", func(_ *testing.T, ns string) *corev1.Secret {
			return certManagerSecret(ns, []byte("garbage"), goodKey)
		}},
		{"a key of another certificate fails closed", func(t *testing.T, ns string) *corev1.Secret {
			return certManagerSecret(ns, good, encodeKey(t, ecKey(t), pkcs8))
		}},
		{"a leaf certificate fails closed", func(t *testing.T, ns string) *corev1.Secret {
			return certManagerSecret(ns, selfSignedCA(t, ec, 24*time.Hour, func(c *x509.Certificate) { c.IsCA = false; c.KeyUsage = x509.KeyUsageDigitalSignature }), goodKey)
		}},
		{"an expired CA fails closed", func(t *testing.T, ns string) *corev1.Secret {
			return certManagerSecret(ns, selfSignedCA(t, ec, -time.Minute), goodKey)
		}},
		{"a CA constrained to another trust domain fails closed", func(t *testing.T, ns string) *corev1.Secret {
			return certManagerSecret(ns, selfSignedCA(t, ec, 24*time.Hour, func(c *x509.Certificate) { c.PermittedURIDomains = []string{"example.org"} }), goodKey)
		}},
		{"a Secret of another type fails closed", func(_ *testing.T, ns string) *corev1.Secret {
			s := certManagerSecret(ns, good, goodKey)
			s.Type = "example.com/not-a-ca"
			return s
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNamespace(t, "external-invalid-"+string(rune('a'+i)))
			createSecret(t, tt.secret(t, ns))
			h := startStore(t, ns, external())
			h.waitReason(t, metav1.ConditionFalse, ReasonCASecretInvalid)
			if _, _, err := h.store.Current(); !errors.Is(err, ErrCASecretInvalid) {
				t.Fatalf("Current = %v; want ErrCASecretInvalid", err)
			}
			waitEvent(t, ns, ReasonCASecretInvalid)
		})
	}
}

// Tests that External mode follows changes of the Secret: a new CA takes over at once with the
// old root still trusted, and a Secret turned corrupt stops issuance.
func TestExternalHotReload(t *testing.T) {
	ns := newNamespace(t, "external-reload")
	oldKey := ecKey(t)
	secret := createSecret(t, certManagerSecret(ns, selfSignedCA(t, oldKey, 24*time.Hour), encodeKey(t, oldKey, sec1)))
	h := startStore(t, ns, external())
	oldCA := h.waitCA(t)
	oldSVID := signSVID(t, oldCA, time.Now())

	newKey := rsaKey(t)
	secret.Data["tls.crt"] = selfSignedCA(t, newKey, 48*time.Hour)
	secret.Data["tls.key"] = encodeKey(t, newKey, pkcs1)
	secret.Data["ca.crt"] = secret.Data["tls.crt"]
	updateSecret(t, secret)
	var newCA *pki.CA
	eventually(t, wait, "the new CA", func() bool {
		newCA = h.waitCA(t)
		return !sameCA(newCA, oldCA)
	})
	bundle, err := h.store.Bundle()
	if err != nil || !bundle.Contains(oldCA.Certificate()) || !bundle.Contains(newCA.Certificate()) {
		t.Fatalf("bundle after rotation holds %d roots (%v); want the old and the new", bundle.Len(), err)
	}
	verifies(t, bundle, oldSVID, time.Now())
	waitPublished(t, ns, bundle)
	waitEvent(t, ns, ReasonCARotated)

	fresh, err := clientset.CoreV1().Secrets(ns).Get(t.Context(), secret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fresh.Data["tls.key"] = []byte("corrupt")
	updateSecret(t, fresh)
	h.waitReason(t, metav1.ConditionFalse, ReasonCASecretInvalid)
	if _, _, err := h.store.Current(); err == nil {
		t.Fatal("a corrupt Secret left a CA in force")
	}
}

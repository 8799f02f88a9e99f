package castore

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"coxswain.dev/coxswain/discovery/pki"
)

// Keys and annotations of the Auto mode CA Secret beyond tls.crt and tls.key.
const (
	keyNextCert  = "next.crt"
	keyNextKey   = "next.key"
	keyRetired   = "retired.json"
	annNextAfter = "discovery.coxswain.dev/next-active-at"
	// annMaxSVIDTTL is the longest SVID lifetime in force while the Secret's CAs signed, so that
	// a restarted replica publishes a successor as long before it signs as the SVIDs of the
	// signing root may live, whatever the lifetime in force now.
	annMaxSVIDTTL = "discovery.coxswain.dev/max-svid-ttl"
)

// content is what a CA Secret holds.
type content struct {
	signing *pki.CA
	// next is the successor (Auto mode), with the time it starts signing.
	next         *pki.CA
	nextActiveAt time.Time
	retired      []pki.RetiredRoot
	// maxTTL is the longest SVID lifetime in force while these CAs signed (Auto mode); zero when
	// not recorded.
	maxTTL time.Duration
}

type retiredEntry struct {
	Certificate string    `json:"certificate"`
	Until       time.Time `json:"until"`
}

// decodeCA reads the signing CA of a Secret of type kubernetes.io/tls or Opaque.
func decodeCA(s *corev1.Secret) (*pki.CA, error) {
	if s.Type != corev1.SecretTypeTLS && s.Type != corev1.SecretTypeOpaque && s.Type != "" {
		return nil, fmt.Errorf("%w: type %s, want %s or %s", ErrCASecretInvalid, s.Type, corev1.SecretTypeTLS, corev1.SecretTypeOpaque)
	}
	ca, err := pki.ParseCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCASecretInvalid, err)
	}
	return ca, nil
}

// decodeAuto reads the signing CA and the rotation state of an Auto mode Secret.
func decodeAuto(s *corev1.Secret) (content, error) {
	ca, err := decodeCA(s)
	if err != nil {
		return content{}, err
	}
	c := content{signing: ca}
	if len(s.Data[keyNextCert]) > 0 {
		if c.next, err = pki.ParseCA(s.Data[keyNextCert], s.Data[keyNextKey]); err != nil {
			return content{}, fmt.Errorf("%w: %s: %w", ErrCASecretInvalid, keyNextCert, err)
		}
		if c.nextActiveAt, err = time.Parse(time.RFC3339, s.Annotations[annNextAfter]); err != nil {
			return content{}, fmt.Errorf("%w: annotation %s: %w", ErrCASecretInvalid, annNextAfter, err)
		}
	}
	if c.retired, err = decodeRetired(s.Data[keyRetired]); err != nil {
		return content{}, fmt.Errorf("%w: %s: %w", ErrCASecretInvalid, keyRetired, err)
	}
	if v, ok := s.Annotations[annMaxSVIDTTL]; ok {
		if c.maxTTL, err = time.ParseDuration(v); err != nil || c.maxTTL < 0 {
			return content{}, fmt.Errorf("%w: annotation %s: %q is not a duration", ErrCASecretInvalid, annMaxSVIDTTL, v)
		}
	}
	return c, nil
}

func decodeRetired(data []byte) ([]pki.RetiredRoot, error) {
	if len(data) == 0 {
		return nil, nil
	}
	var entries []retiredEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, err
	}
	out := make([]pki.RetiredRoot, 0, len(entries))
	for _, e := range entries {
		block, _ := pem.Decode([]byte(e.Certificate))
		if block == nil {
			return nil, pki.ErrNoCertificate
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, pki.RetiredRoot{Certificate: cert, LastLeafExpiry: e.Until})
	}
	return out, nil
}

// encodeAuto writes c into s, an Auto mode Secret, keeping its other metadata. Retired roots
// whose leaves have all expired by now are left out.
func encodeAuto(s *corev1.Secret, c content, now time.Time) error {
	certPEM, keyPEM, err := c.signing.EncodePEM()
	if err != nil {
		return err
	}
	s.Type = corev1.SecretTypeTLS
	s.Data = map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}
	if s.Annotations != nil {
		delete(s.Annotations, annNextAfter)
	}
	if c.maxTTL > 0 {
		metav1.SetMetaDataAnnotation(&s.ObjectMeta, annMaxSVIDTTL, c.maxTTL.String())
	}
	if c.next != nil {
		if s.Data[keyNextCert], s.Data[keyNextKey], err = c.next.EncodePEM(); err != nil {
			return err
		}
		metav1.SetMetaDataAnnotation(&s.ObjectMeta, annNextAfter, c.nextActiveAt.UTC().Format(time.RFC3339))
	}
	entries := make([]retiredEntry, 0, len(c.retired))
	for _, r := range c.retired {
		if live(r, now) {
			entries = append(entries, retiredEntry{Certificate: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate.Raw})), Until: r.LastLeafExpiry.UTC()})
		}
	}
	if len(entries) > 0 {
		if s.Data[keyRetired], err = json.Marshal(entries); err != nil {
			return err
		}
	}
	return nil
}

// live reports whether a retired root may still have an unexpired leaf at now.
func live(r pki.RetiredRoot, now time.Time) bool {
	return now.Before(r.LastLeafExpiry) && now.Before(r.Certificate.NotAfter)
}

// usable reports whether ca can sign SVIDs of td at now.
func usable(ca *pki.CA, td spiffeid.TrustDomain, now time.Time) bool {
	return ca != nil && ca.CheckValid(now) == nil && permits(ca.Certificate(), td)
}

// checkUsable explains why ca cannot sign SVIDs of td at now.
func checkUsable(ca *pki.CA, td spiffeid.TrustDomain, now time.Time) error {
	if err := ca.CheckValid(now); err != nil {
		return fmt.Errorf("%w: %w", ErrCASecretInvalid, err)
	}
	if !permits(ca.Certificate(), td) {
		return fmt.Errorf("%w: the CA's URI name constraints %q exclude trust domain %s",
			ErrCASecretInvalid, ca.Certificate().PermittedURIDomains, td)
	}
	return nil
}

// permits reports whether cert's URI name constraints, if any, allow IDs of td.
func permits(cert *x509.Certificate, td spiffeid.TrustDomain) bool {
	domains := cert.PermittedURIDomains
	return len(domains) == 0 || slices.Contains(domains, td.Name())
}

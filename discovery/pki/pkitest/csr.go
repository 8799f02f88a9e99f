package pkitest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"net/url"
	"testing"
)

// KeyType names a key algorithm and size for a CSR.
type KeyType string

// The key types NewKey can make.
const (
	P224    KeyType = "P-224"
	P256    KeyType = "P-256"
	P384    KeyType = "P-384"
	P521    KeyType = "P-521"
	Ed25519 KeyType = "Ed25519"
	RSA1024 KeyType = "RSA-1024"
	RSA2048 KeyType = "RSA-2048"
	RSA4096 KeyType = "RSA-4096"
)

// NewKey generates a private key of type kt.
func NewKey(t testing.TB, kt KeyType) crypto.Signer {
	t.Helper()
	var (
		key crypto.Signer
		err error
	)
	switch kt {
	case P224:
		key, err = ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	case P256:
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case P384:
		key, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case P521:
		key, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	case Ed25519:
		_, key, err = ed25519.GenerateKey(rand.Reader)
	case RSA1024:
		key, err = rsa.GenerateKey(rand.Reader, 1024) //nolint:gosec // a weak key on purpose, for rejection tests
	case RSA2048:
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	case RSA4096:
		key, err = rsa.GenerateKey(rand.Reader, 4096)
	default:
		t.Fatalf("pkitest: unknown key type %q", kt)
	}
	if err != nil {
		t.Fatalf("pkitest: generate %s key: %v", kt, err)
	}
	return key
}

type csrConfig struct {
	key       crypto.Signer
	keyType   KeyType
	tmpl      x509.CertificateRequest
	corrupt   bool
	requestCA bool
}

// CSROption changes a CSR that CSR makes.
type CSROption func(*csrConfig)

// WithKey signs the CSR with key.
func WithKey(key crypto.Signer) CSROption { return func(c *csrConfig) { c.key = key } }

// WithKeyType signs the CSR with a fresh key of type kt.
func WithKeyType(kt KeyType) CSROption { return func(c *csrConfig) { c.keyType = kt } }

// RequestURIs asks for URI SANs.
func RequestURIs(uris ...string) CSROption {
	return func(c *csrConfig) {
		for _, s := range uris {
			u, err := url.Parse(s)
			if err != nil {
				panic("pkitest: bad URI " + s)
			}
			c.tmpl.URIs = append(c.tmpl.URIs, u)
		}
	}
}

// RequestDNSNames asks for DNS SANs.
func RequestDNSNames(names ...string) CSROption {
	return func(c *csrConfig) { c.tmpl.DNSNames = append(c.tmpl.DNSNames, names...) }
}

// RequestSubject asks for a subject.
func RequestSubject(name pkix.Name) CSROption { return func(c *csrConfig) { c.tmpl.Subject = name } }

// RequestCA asks for basic constraints CA:TRUE and key usage keyCertSign.
func RequestCA() CSROption { return func(c *csrConfig) { c.requestCA = true } }

// CorruptSignature flips a bit of the CSR's self-signature.
func CorruptSignature() CSROption { return func(c *csrConfig) { c.corrupt = true } }

var (
	oidBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}
	oidKeyUsage         = asn1.ObjectIdentifier{2, 5, 29, 15}
)

// CSR returns a DER CSR, by default for a fresh ECDSA P-256 key with no names.
func CSR(t testing.TB, opts ...CSROption) []byte {
	t.Helper()
	cfg := csrConfig{keyType: P256}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.key == nil {
		cfg.key = NewKey(t, cfg.keyType)
	}
	if cfg.requestCA {
		cfg.tmpl.ExtraExtensions = caExtensions(t)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &cfg.tmpl, cfg.key)
	if err != nil {
		t.Fatalf("pkitest: create CSR: %v", err)
	}
	if cfg.corrupt {
		// The signature BIT STRING ends the DER; flipping the last byte breaks it.
		der[len(der)-1] ^= 0x01
	}
	return der
}

func caExtensions(t testing.TB) []pkix.Extension {
	t.Helper()
	bc, err := asn1.Marshal(struct {
		IsCA bool `asn1:"optional"`
	}{IsCA: true})
	if err != nil {
		t.Fatalf("pkitest: marshal basic constraints: %v", err)
	}
	ku, err := asn1.Marshal(asn1.BitString{Bytes: []byte{0x06}, BitLength: 7}) // keyCertSign, cRLSign
	if err != nil {
		t.Fatalf("pkitest: marshal key usage: %v", err)
	}
	return []pkix.Extension{
		{Id: oidBasicConstraints, Critical: true, Value: bc},
		{Id: oidKeyUsage, Critical: true, Value: ku},
	}
}

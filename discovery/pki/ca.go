package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

const (
	// MinCALifetime is the shortest lifetime NewCA accepts.
	MinCALifetime = time.Hour
	// MaxCALifetime is the longest lifetime NewCA accepts.
	MaxCALifetime = 10 * 365 * 24 * time.Hour

	caCommonName   = "coxswain discovery CA"
	caOrganization = "coxswain"
)

// CA is a signing certificate authority: its certificate and the matching private key.
type CA struct {
	cert   *x509.Certificate
	signer crypto.Signer
}

// New checks that cert is a CA whose public key matches signer and returns it.
func New(cert *x509.Certificate, signer crypto.Signer) (*CA, error) {
	if err := checkCACertificate(cert); err != nil {
		return nil, err
	}
	if err := checkKeyPair(cert, signer); err != nil {
		return nil, err
	}
	return &CA{cert: cert, signer: signer}, nil
}

// NewCA generates an ECDSA P-256 self-signed root valid from now for lifetime, whose URI name
// constraint limits it to SPIFFE IDs of td.
func NewCA(td spiffeid.TrustDomain, lifetime time.Duration, now time.Time) (*CA, error) {
	if td.IsZero() {
		return nil, fmt.Errorf("%w: empty trust domain", ErrInvalidID)
	}
	if lifetime < MinCALifetime || lifetime > MaxCALifetime {
		return nil, fmt.Errorf("%w: CA lifetime %s not in [%s, %s]", ErrInvalidLifetime, lifetime, MinCALifetime, MaxCALifetime)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl, err := caTemplate(td, lifetime, now)
	if err != nil {
		return nil, err
	}
	cert, err := createCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA: %w", err)
	}
	return &CA{cert: cert, signer: key}, nil
}

func caTemplate(td spiffeid.TrustDomain, lifetime time.Duration, now time.Time) (*x509.Certificate, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	return &x509.Certificate{
		SerialNumber:                serial,
		Subject:                     pkix.Name{CommonName: caCommonName, Organization: []string{caOrganization}},
		NotBefore:                   now.Add(-ClockSkew).UTC(),
		NotAfter:                    now.Add(lifetime).UTC(),
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		PermittedURIDomains:         []string{td.Name()},
		PermittedDNSDomainsCritical: true,
	}, nil
}

// Certificate returns the CA certificate. Callers must not modify it.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Signer returns the CA private key.
func (ca *CA) Signer() crypto.Signer { return ca.signer }

// CheckValid reports ErrCAExpired when now is outside the CA validity period.
func (ca *CA) CheckValid(now time.Time) error {
	if now.Before(ca.cert.NotBefore) || now.After(ca.cert.NotAfter) {
		return fmt.Errorf("%w: valid %s to %s, now %s", ErrCAExpired,
			ca.cert.NotBefore.Format(time.RFC3339), ca.cert.NotAfter.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// checkCACertificate requires basic constraints with IsCA and, when key usage is present, certSign.
// An absent key usage extension places no restriction (RFC 5280), which openssl-made roots rely on.
func checkCACertificate(cert *x509.Certificate) error {
	if cert == nil {
		return ErrNoCertificate
	}
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return fmt.Errorf("%w: basic constraints do not allow signing", ErrNotCA)
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return fmt.Errorf("%w: key usage lacks certSign", ErrNotCA)
	}
	return nil
}

// checkKeyPair requires signer to be the private half of cert's public key and of an allowed kind.
func checkKeyPair(cert *x509.Certificate, signer crypto.Signer) error {
	if signer == nil {
		return ErrNoKey
	}
	if err := checkCAKey(signer.Public()); err != nil {
		return err
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return ErrKeyMismatch
	}
	return nil
}

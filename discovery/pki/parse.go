package pki

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
)

const (
	pemCertificate = "CERTIFICATE"
	pemPKCS8       = "PRIVATE KEY"
	pemPKCS1       = "RSA PRIVATE KEY"
	pemSEC1        = "EC PRIVATE KEY"
)

// ParseCA parses a CA Secret's tls.crt and tls.key. The first certificate of certPEM is the
// CA; any following ones are ignored. The key may be PKCS#1, SEC1 or PKCS#8.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseFirstCertificate(certPEM)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	key, err := ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parse CA key: %w", err)
	}
	return New(cert, key)
}

// EncodePEM returns the CA certificate and its PKCS#8 key in PEM, as tls.crt and tls.key.
func (ca *CA) EncodePEM() (certPEM, keyPEM []byte, err error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.signer)
	if err != nil {
		return nil, nil, fmt.Errorf("encode CA key: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: ca.cert.Raw})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: pemPKCS8, Bytes: der})
	return certPEM, keyPEM, nil
}

func parseFirstCertificate(data []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, ErrNoCertificate
		}
		if block.Type == pemCertificate {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// ParsePrivateKeyPEM parses the first private key block of data, skipping others such as
// "EC PARAMETERS". It accepts PKCS#1 RSA, SEC1 EC and PKCS#8 keys.
func ParsePrivateKeyPEM(data []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, ErrNoKey
		}
		switch block.Type {
		case pemPKCS8:
			return parsePKCS8(block.Bytes)
		case pemPKCS1:
			return x509.ParsePKCS1PrivateKey(block.Bytes)
		case pemSEC1:
			return x509.ParseECPrivateKey(block.Bytes)
		}
	}
}

func parsePKCS8(der []byte) (crypto.Signer, error) {
	key, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: PKCS#8 key of type %T cannot sign", ErrUnsupportedKey, key)
	}
	return signer, nil
}

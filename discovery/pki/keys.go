package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"fmt"
)

const (
	// MinRSABits is the smallest RSA modulus of a CSR or CA key.
	MinRSABits = 2048
	// MaxRSABits is the largest RSA modulus of a CSR or CA key.
	MaxRSABits = 8192
)

// checkCSRKey allows ECDSA P-256 and P-384, Ed25519 and RSA of MinRSABits..MaxRSABits.
func checkCSRKey(pub crypto.PublicKey) error {
	if k, ok := pub.(*ecdsa.PublicKey); ok && k.Curve == elliptic.P521() {
		return fmt.Errorf("%w: ECDSA curve P-521", ErrUnsupportedKey)
	}
	return checkCAKey(pub)
}

// checkCAKey allows what checkCSRKey allows plus ECDSA P-521, which cert-manager may produce.
func checkCAKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		default:
			return fmt.Errorf("%w: ECDSA curve %s", ErrUnsupportedKey, k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
		return nil
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < MinRSABits || bits > MaxRSABits {
			return fmt.Errorf("%w: RSA key of %d bits not in [%d, %d]", ErrUnsupportedKey, bits, MinRSABits, MaxRSABits)
		}
		return nil
	default:
		return fmt.Errorf("%w: key type %T", ErrUnsupportedKey, pub)
	}
}

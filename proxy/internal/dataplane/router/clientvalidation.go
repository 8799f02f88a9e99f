package router

import (
	"crypto/x509"
	"fmt"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// ClientValidation is how an HTTPS listener validates client certificates (the Gateway's
// spec.tls.frontend for the port).
type ClientValidation struct {
	// Roots are the CA certificates a client's chain must verify against.
	Roots *x509.CertPool
	// InsecureFallback lets a client without a valid certificate through; otherwise the
	// handshake fails without one.
	InsecureFallback bool
}

// clientValidation validates a listener's client certificate validation: only on HTTPS, with
// at least one parsable CA certificate. It returns nil when the listener has none.
func clientValidation(in *discoveryv1.Listener, proto Protocol) (*ClientValidation, error) {
	v := in.GetClientValidation()
	if v == nil {
		return nil, nil
	}
	if proto != HTTPS {
		return nil, fmt.Errorf("listener %s: %w: client validation on a %s listener", in.GetName(), ErrInvalid, proto)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(v.GetCaCertificatesPem()) {
		return nil, fmt.Errorf("listener %s: %w: client validation without a usable CA certificate", in.GetName(), ErrInvalid)
	}
	return &ClientValidation{Roots: roots, InsecureFallback: v.GetInsecureFallback()}, nil
}

// ClientValidation returns the client certificate validation of the listener that vh belongs
// to, nil when it asks for none.
func (p *Port) ClientValidation(vh *VirtualHost) *ClientValidation {
	if vh == nil {
		return nil
	}
	return p.validation[vh.Listener]
}

package router

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// BackendTLS is how the endpoints of a cluster are reached over TLS (a BackendTLSPolicy).
type BackendTLS struct {
	// Config is the client configuration of every connection to the cluster's endpoints:
	// TLS 1.2 or later, the server name as SNI, the policy's roots (nil: the system's), ALPN
	// h2 or http/1.1, and the subject alt names checked when the policy lists them. Nil when
	// FailClosed.
	Config *tls.Config
	// StreamConfig is Config without ALPN: the client configuration of the connections that
	// carry a TLS listener's decrypted stream (Terminate mode) to the endpoints. Nil when
	// FailClosed.
	StreamConfig *tls.Config
	// HTTP2 says the endpoints speak HTTP/2 over TLS (ALPN h2); HTTP/1.1 otherwise.
	HTTP2 bool
	// FailClosed says the policy cannot be met: the cluster answers 503 and is never dialed.
	FailClosed bool
	// Key identifies the settings: connections are shared only between clusters of equal keys.
	Key string
}

// ErrSubjectAltName reports a backend certificate that chains to the roots but holds none of
// the policy's subject alt names.
var ErrSubjectAltName = errors.New("backend certificate holds none of the expected subject alt names")

// backendTLS validates a cluster's TLS settings and builds its client configuration.
func backendTLS(in *discoveryv1.BackendTLS, http2 bool) (*BackendTLS, error) {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("%w: tls: %w", ErrInvalid, err)
	}
	sum := sha256.Sum256(raw)
	out := &BackendTLS{HTTP2: http2, FailClosed: in.GetFailClosed(), Key: hex.EncodeToString(sum[:])}
	if http2 {
		out.Key += "/h2"
	}
	if out.FailClosed {
		return out, nil
	}
	if in.GetServerName() == "" {
		return nil, fmt.Errorf("%w: tls without a server name", ErrInvalid)
	}
	var roots *x509.CertPool // nil verifies against the system roots
	switch {
	case in.GetSystemRoots() && len(in.GetCaCertificatesPem()) > 0:
		return nil, fmt.Errorf("%w: tls with both system roots and CA certificates", ErrInvalid)
	case !in.GetSystemRoots():
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(in.GetCaCertificatesPem()) {
			return nil, fmt.Errorf("%w: tls CA certificates hold no certificate", ErrInvalid)
		}
	}
	sans, err := subjectAltNames(in.GetSubjectAltNames())
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: in.GetServerName(),
		RootCAs:    roots,
		NextProtos: []string{"http/1.1"},
	}
	if http2 {
		cfg.NextProtos = []string{"h2"}
	}
	if err := clientCertificate(cfg, in); err != nil {
		return nil, err
	}
	if len(sans) > 0 {
		// The names to authenticate are the subject alt names, not the server name, so the
		// standard check (chain and server name) is replaced by verifySANs (chain and names).
		cfg.InsecureSkipVerify = true //nolint:gosec // verifySANs verifies the chain and the names
		cfg.VerifyConnection = verifySANs(roots, sans)
	}
	out.Config = cfg
	out.StreamConfig = cfg.Clone()
	out.StreamConfig.NextProtos = nil
	return out, nil
}

// clientCertificate sets the key pair the proxy presents when an endpoint asks for a client
// certificate (the Gateway's backend clientCertificateRef); without one the proxy presents none.
func clientCertificate(cfg *tls.Config, in *discoveryv1.BackendTLS) error {
	chain, key := in.GetClientCertificateChainPem(), in.GetClientPrivateKeyPem()
	if len(chain) == 0 && len(key) == 0 {
		return nil
	}
	cert, err := tls.X509KeyPair(chain, key)
	if err != nil {
		return fmt.Errorf("%w: tls client certificate: %w", ErrInvalid, err)
	}
	cfg.Certificates = []tls.Certificate{cert}
	return nil
}

// subjectAlt is one accepted name: a DNS name or a URI.
type subjectAlt struct {
	hostname, uri string
}

func subjectAltNames(in []*discoveryv1.SubjectAltName) ([]subjectAlt, error) {
	out := make([]subjectAlt, 0, len(in))
	for _, san := range in {
		switch {
		case san.GetHostname() != "":
			out = append(out, subjectAlt{hostname: san.GetHostname()})
		case san.GetUri() != "":
			out = append(out, subjectAlt{uri: san.GetUri()})
		default:
			return nil, fmt.Errorf("%w: tls subject alt name without a name", ErrInvalid)
		}
	}
	return out, nil
}

// verifySANs returns a VerifyConnection that verifies the peer's chain against roots (nil: the
// system's) for server authentication, then requires one of sans in its leaf: a hostname as a
// TLS client matches one (wildcards in the certificate included), a URI exactly.
func verifySANs(roots *x509.CertPool, sans []subjectAlt) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return &tls.CertificateVerificationError{Err: errors.New("backend sent no certificate")}
		}
		leaf := cs.PeerCertificates[0]
		opts := x509.VerifyOptions{
			Roots:         roots,
			Intermediates: x509.NewCertPool(),
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := leaf.Verify(opts); err != nil {
			return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
		}
		for _, san := range sans {
			if san.hostname != "" && leaf.VerifyHostname(san.hostname) == nil {
				return nil
			}
			if san.uri != "" && slices.ContainsFunc(leaf.URIs, func(u *url.URL) bool { return u.String() == san.uri }) {
				return nil
			}
		}
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: ErrSubjectAltName}
	}
}

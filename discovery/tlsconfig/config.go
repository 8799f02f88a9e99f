package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// BootstrapServer serves certs over TLS 1.3. The bootstrap caller authenticates with its token;
// a proxy renewing its identity may also present its current SVID, which the bootstrap service
// verifies itself and uses only to give the renewal priority, never to authorize it.
func BootstrapServer(certs CertificateSource) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequestClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return getCertificate(certs)
		},
	}
}

// BootstrapClient verifies the server's chain against the current bundle, its DNS SAN against
// serverName and its one SPIFFE ID with authorize (AuthorizeServiceAccount of the controller):
// a certificate of the same CA for that DNS name but another identity is refused. It presents no
// certificate unless the caller sets GetClientCertificate.
func BootstrapClient(bundles BundleSource, serverName string, authorize Authorizer) *tls.Config {
	if serverName == "" {
		panic("tlsconfig: BootstrapClient needs a server name")
	}
	if authorize == nil {
		panic("tlsconfig: nil authorizer")
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: serverName,
		// Verification happens in VerifyConnection against the bundle of the moment, which
		// the static RootCAs field cannot express.
		InsecureSkipVerify: true, //nolint:gosec // the chain and name are verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := verifyChain(cs.PeerCertificates, bundles, x509.ExtKeyUsageServerAuth, serverName, time.Now()); err != nil {
				return fmt.Errorf("tlsconfig: verify server %s: %w", serverName, err)
			}
			leaf := cs.PeerCertificates[0]
			if len(leaf.URIs) != 1 {
				return fmt.Errorf("tlsconfig: server %s: %w: %d URI SANs, want one SPIFFE ID", serverName, ErrUnauthorized, len(leaf.URIs))
			}
			id, err := spiffeid.FromURI(leaf.URIs[0])
			if err != nil {
				return fmt.Errorf("tlsconfig: server %s: %w", serverName, err)
			}
			if err := authorize(id); err != nil {
				return fmt.Errorf("tlsconfig: authorize server %s: %w", serverName, err)
			}
			return nil
		},
	}
}

// MTLSServer serves certs over TLS 1.3 and requires a client certificate that chains to the
// current bundle and carries exactly one SPIFFE ID of td with a path, which authorize accepts.
// Anything else fails the handshake.
func MTLSServer(certs CertificateSource, bundles BundleSource, td spiffeid.TrustDomain, authorize Authorizer) *tls.Config {
	mustSPIFFE(td, authorize)
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain is verified in VerifyConnection against the bundle of the moment.
		ClientAuth: tls.RequireAnyClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return getCertificate(certs)
		},
		VerifyConnection: spiffePeerVerifier(bundles, td, x509.ExtKeyUsageClientAuth, authorize),
		// Every connection runs a full handshake, so a rotated bundle applies at once.
		SessionTicketsDisabled: true,
	}
}

// MTLSClient presents certs over TLS 1.3 and requires the server certificate to chain to the
// current bundle and carry exactly one SPIFFE ID of td with a path, which authorize accepts.
func MTLSClient(certs CertificateSource, bundles BundleSource, td spiffeid.TrustDomain, authorize Authorizer) *tls.Config {
	mustSPIFFE(td, authorize)
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return getCertificate(certs)
		},
		// The server is named by its SPIFFE ID, not its host name; the chain and the ID are
		// verified in VerifyConnection against the bundle of the moment.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection:   spiffePeerVerifier(bundles, td, x509.ExtKeyUsageServerAuth, authorize),
	}
}

func mustSPIFFE(td spiffeid.TrustDomain, authorize Authorizer) {
	if td.IsZero() {
		panic("tlsconfig: empty trust domain")
	}
	if authorize == nil {
		panic("tlsconfig: nil authorizer")
	}
}

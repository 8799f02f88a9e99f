package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

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

// BootstrapClient verifies the server with go-spiffe against the current bundle, requires a
// chain for server auth, its DNS SAN serverName and a SPIFFE ID with a path that authorize
// accepts (AuthorizeServiceAccount of the controller): a certificate of the same CA for that DNS
// name but another identity is refused. It presents no certificate unless the caller sets
// GetClientCertificate.
func BootstrapClient(bundles BundleSource, serverName string, authorize Authorizer) *tls.Config {
	if serverName == "" {
		panic("tlsconfig: BootstrapClient needs a server name")
	}
	if authorize == nil {
		panic("tlsconfig: nil authorizer")
	}
	verify := peerVerifier(bundles, AuthorizeAll(
		AuthorizeExtKeyUsage(x509.ExtKeyUsageServerAuth), AuthorizeDNSName(serverName), AuthorizeWorkload(), authorize,
	))
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: serverName,
		// Verification happens in VerifyConnection against the bundle of the moment, which
		// the static RootCAs field cannot express.
		InsecureSkipVerify: true, //nolint:gosec // the chain and name are verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := verify(cs); err != nil {
				return fmt.Errorf("tlsconfig: server %s: %w", serverName, err)
			}
			return nil
		},
	}
}

// MTLSServer serves certs over TLS 1.3 and requires a client certificate that go-spiffe verifies
// against the current bundle, with a chain for client auth and one SPIFFE ID of td with a path,
// which authorize accepts. Anything else fails the handshake.
func MTLSServer(certs CertificateSource, bundles BundleSource, td spiffeid.TrustDomain, authorize Authorizer) *tls.Config {
	mustSPIFFE(td, authorize)
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain is verified in VerifyConnection against the bundle of the moment.
		ClientAuth: tls.RequireAnyClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return getCertificate(certs)
		},
		VerifyConnection: peerVerifier(bundles, workload(td, x509.ExtKeyUsageClientAuth, authorize)),
		// Every connection runs a full handshake, so a rotated bundle applies at once.
		SessionTicketsDisabled: true,
	}
}

// MTLSClient presents certs over TLS 1.3 and requires a server certificate that go-spiffe
// verifies against the current bundle, with a chain for server auth and one SPIFFE ID of td with
// a path, which authorize accepts.
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
		VerifyConnection:   peerVerifier(bundles, workload(td, x509.ExtKeyUsageServerAuth, authorize)),
	}
}

// workload is the rule of both ends of the stream: a chain for usage, an ID of td with a path,
// then authorize.
func workload(td spiffeid.TrustDomain, usage x509.ExtKeyUsage, authorize Authorizer) Authorizer {
	return AuthorizeAll(AuthorizeExtKeyUsage(usage), AuthorizeMemberOf(td), AuthorizeWorkload(), authorize)
}

func mustSPIFFE(td spiffeid.TrustDomain, authorize Authorizer) {
	if td.IsZero() {
		panic("tlsconfig: empty trust domain")
	}
	if authorize == nil {
		panic("tlsconfig: nil authorizer")
	}
}

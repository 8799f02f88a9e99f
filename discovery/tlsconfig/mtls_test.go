package tlsconfig_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

const (
	controllerID = "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-controller"
	proxyID      = "spiffe://cluster.local/ns/prod/sa/gw-coxswain"
)

var td = spiffeid.RequireTrustDomainFromString("cluster.local")

func static(cert *tls.Certificate) *tlsconfig.RotatingCertificate {
	return tlsconfig.NewRotatingCertificate(cert)
}

func roots(cas ...*pki.CA) *tlsconfig.RotatingBundle {
	return tlsconfig.NewRotatingBundle(pkitest.Bundle(cas...))
}

// noCertificate makes a client that answers the certificate request with an empty one.
type noCertificate struct{}

func (noCertificate) Certificate() (*tls.Certificate, error) { return &tls.Certificate{}, nil }

// Tests that the stream server refuses at the handshake every client certificate that is not a
// valid SVID of its trust domain, and accepts a valid one.
func TestMTLSServerRefusesBadClients(t *testing.T) {
	t.Parallel()
	ca := pkitest.NewCA(t, "cluster.local")
	foreignCA := pkitest.NewCA(t, "cluster.local")
	evilCA := pkitest.NewCA(t, "evil.local")
	serverCfg := tlsconfig.MTLSServer(static(pkitest.SVID(t, ca, controllerID)), roots(ca, evilCA), td, tlsconfig.AuthorizeAny())
	srv := startServer(t, serverCfg)

	tests := []struct {
		name    string
		cert    tlsconfig.CertificateSource
		wantErr error
		wantAs  any
	}{
		{"a client without a certificate is refused", noCertificate{}, nil, nil},
		{"a client signed by a foreign CA is refused", static(pkitest.SVID(t, foreignCA, proxyID)), nil, new(x509.UnknownAuthorityError)},
		{"a client of a foreign trust domain is refused", static(pkitest.SVID(t, evilCA, "spiffe://evil.local/ns/prod/sa/gw")), spiffe.ErrForeignTrustDomain, nil},
		{"a client our CA signed for a foreign trust domain is refused", static(pkitest.SVID(t, ca, "spiffe://evil.local/ns/prod/sa/gw")), nil, new(x509.CertificateInvalidError)},
		{"a client with an empty SPIFFE path is refused", static(pkitest.SVID(t, ca, "spiffe://cluster.local")), spiffe.ErrEmptyPath, nil},
		{"a client with two URI SANs is refused", static(pkitest.Issue(t, ca, pkitest.URIs(proxyID, controllerID))), spiffe.ErrMultipleURISANs, nil},
		{"a client without a URI SAN is refused", static(pkitest.Issue(t, ca, pkitest.DNSNames("proxy.prod.svc"))), spiffe.ErrNoURISAN, nil},
		{"an expired client is refused", static(pkitest.SVID(t, ca, proxyID, pkitest.Expired())), nil, new(x509.CertificateInvalidError)},
		{"a client that is not yet valid is refused", static(pkitest.SVID(t, ca, proxyID, pkitest.NotYetValid())), nil, new(x509.CertificateInvalidError)},
		{"a client holding a CA certificate is refused", static(pkitest.SVID(t, ca, proxyID, pkitest.AsCA())), spiffe.ErrCACertificate, nil},
		{"a client certificate only for server auth is refused", static(pkitest.SVID(t, ca, proxyID, pkitest.ExtKeyUsages(x509.ExtKeyUsageServerAuth))), nil, new(x509.CertificateInvalidError)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clientCfg := tlsconfig.MTLSClient(tt.cert, roots(ca), td, tlsconfig.AuthorizeAny())
			res, clientErr := srv.dial(t, clientCfg)
			wantRefused(t, res.err, clientErr, tt.wantErr)
			if tt.wantAs != nil && !errors.As(res.err, tt.wantAs) {
				t.Fatalf("refused with %v, want %T", res.err, tt.wantAs)
			}
		})
	}

	t.Run("a valid SVID is accepted and its ID is readable", func(t *testing.T) {
		clientCfg := tlsconfig.MTLSClient(static(pkitest.SignedSVID(t, ca, proxyID)), roots(ca), td, tlsconfig.AuthorizeID(spiffeid.RequireFromString(controllerID)))
		res, clientErr := srv.dial(t, clientCfg)
		if clientErr != nil || res.err != nil {
			t.Fatalf("handshake: client %v, server %v", clientErr, res.err)
		}
		if res.state.Version != tls.VersionTLS13 {
			t.Fatalf("version %x, want TLS 1.3", res.state.Version)
		}
		id, err := spiffe.PeerIDFromChain(res.state.PeerCertificates, td)
		if err != nil || id.String() != proxyID {
			t.Fatalf("peer ID = %q, %v", id, err)
		}
	})
}

// Tests that the authorizer runs after verification and can refuse a valid peer.
func TestMTLSServerAuthorizer(t *testing.T) {
	t.Parallel()
	ca := pkitest.NewCA(t, "cluster.local")
	only := tlsconfig.AuthorizeID(spiffeid.RequireFromString(proxyID))
	srv := startServer(t, tlsconfig.MTLSServer(static(pkitest.SVID(t, ca, controllerID)), roots(ca), td, only))

	other := static(pkitest.SVID(t, ca, "spiffe://cluster.local/ns/prod/sa/other"))
	res, clientErr := srv.dial(t, tlsconfig.MTLSClient(other, roots(ca), td, tlsconfig.AuthorizeAny()))
	wantRefused(t, res.err, clientErr, tlsconfig.ErrUnauthorized)

	res, clientErr = srv.dial(t, tlsconfig.MTLSClient(static(pkitest.SVID(t, ca, proxyID)), roots(ca), td, tlsconfig.AuthorizeAny()))
	if clientErr != nil || res.err != nil {
		t.Fatalf("allowed peer: client %v, server %v", clientErr, res.err)
	}
}

// Tests that the stream client refuses a server that is not the expected SVID.
func TestMTLSClientRefusesBadServers(t *testing.T) {
	t.Parallel()
	ca := pkitest.NewCA(t, "cluster.local")
	foreignCA := pkitest.NewCA(t, "cluster.local")
	want := tlsconfig.AuthorizeID(spiffeid.RequireFromString(controllerID))
	tests := []struct {
		name    string
		cert    *tls.Certificate
		wantErr error
	}{
		{"a server signed by a foreign CA is refused", pkitest.SVID(t, foreignCA, controllerID), nil},
		{"a server with another SPIFFE ID is refused", pkitest.SVID(t, ca, proxyID), tlsconfig.ErrUnauthorized},
		{"a server with an empty SPIFFE path is refused", pkitest.SVID(t, ca, "spiffe://cluster.local"), spiffe.ErrEmptyPath},
		{"a server with two URI SANs is refused", pkitest.Issue(t, ca, pkitest.URIs(controllerID, proxyID)), spiffe.ErrMultipleURISANs},
		{"an expired server is refused", pkitest.SVID(t, ca, controllerID, pkitest.Expired()), nil},
		{"a server certificate only for client auth is refused", pkitest.SVID(t, ca, controllerID, pkitest.ExtKeyUsages(x509.ExtKeyUsageClientAuth)), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, tlsconfig.MTLSServer(static(tt.cert), roots(ca), td, tlsconfig.AuthorizeAny()))
			res, clientErr := srv.dial(t, tlsconfig.MTLSClient(static(pkitest.SVID(t, ca, proxyID)), roots(ca), td, want))
			wantRefused(t, clientErr, res.err, tt.wantErr)
		})
	}
}

// Tests that a missing certificate or bundle fails closed.
func TestEmptySourcesFailClosed(t *testing.T) {
	t.Parallel()
	ca := pkitest.NewCA(t, "cluster.local")
	client := tlsconfig.MTLSClient(static(pkitest.SVID(t, ca, proxyID)), roots(ca), td, tlsconfig.AuthorizeAny())

	srv := startServer(t, tlsconfig.MTLSServer(&tlsconfig.RotatingCertificate{}, roots(ca), td, tlsconfig.AuthorizeAny()))
	res, clientErr := srv.dial(t, client)
	wantRefused(t, res.err, clientErr, tlsconfig.ErrNoCertificate)

	srv = startServer(t, tlsconfig.MTLSServer(static(pkitest.SVID(t, ca, controllerID)), &tlsconfig.RotatingBundle{}, td, tlsconfig.AuthorizeAny()))
	res, clientErr = srv.dial(t, client)
	wantRefused(t, res.err, clientErr, tlsconfig.ErrNoBundle)
}

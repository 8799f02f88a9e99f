package tlsconfig_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"

	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

const serverName = "coxswain-discovery.coxswain-system.svc"

// controllerAuth accepts the controller's ServiceAccount in any trust domain, as a proxy does
// before its first SVID tells it the trust domain.
var controllerAuth = tlsconfig.AuthorizeServiceAccount("coxswain-system", "coxswain-controller")

// Tests that the bootstrap client trusts only a server of the bundle named serverName, and that
// the bootstrap server asks for no client certificate.
func TestBootstrap(t *testing.T) {
	t.Parallel()
	ca := pkitest.NewCA(t, "cluster.local")
	foreignCA := pkitest.NewCA(t, "cluster.local")
	good := pkitest.SVID(t, ca, controllerID, pkitest.DNSNames(serverName))
	tests := []struct {
		name   string
		cert   *tls.Certificate
		client *tls.Config
		wantAs any
		wantOK bool
	}{
		{"a server of the bundle with the right name is trusted", good, tlsconfig.BootstrapClient(roots(ca), serverName, controllerAuth), nil, true},
		{"a server with another name is refused", good, tlsconfig.BootstrapClient(roots(ca), "evil.example", controllerAuth), new(x509.HostnameError), false},
		{"a server signed by a foreign CA is refused", pkitest.SVID(t, foreignCA, controllerID, pkitest.DNSNames(serverName)), tlsconfig.BootstrapClient(roots(ca), serverName, controllerAuth), new(x509.UnknownAuthorityError), false},
		{"an expired server is refused", pkitest.SVID(t, ca, controllerID, pkitest.DNSNames(serverName), pkitest.Expired()), tlsconfig.BootstrapClient(roots(ca), serverName, controllerAuth), new(x509.CertificateInvalidError), false},
		{"a server that is not yet valid is refused", pkitest.SVID(t, ca, controllerID, pkitest.DNSNames(serverName), pkitest.NotYetValid()), tlsconfig.BootstrapClient(roots(ca), serverName, controllerAuth), new(x509.CertificateInvalidError), false},
		{"a server of the bundle with the right name but another SPIFFE ID is refused", pkitest.SVID(t, ca, "spiffe://cluster.local/ns/prod/sa/web-coxswain", pkitest.DNSNames(serverName)), tlsconfig.BootstrapClient(roots(ca), serverName, controllerAuth), nil, false},
		{"a server of the bundle with the right name and no SPIFFE ID is refused", pkitest.Issue(t, ca, pkitest.DNSNames(serverName)), tlsconfig.BootstrapClient(roots(ca), serverName, controllerAuth), nil, false},
		{"a client without a bundle refuses every server", good, tlsconfig.BootstrapClient(&tlsconfig.RotatingBundle{}, serverName, controllerAuth), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, tlsconfig.BootstrapServer(static(tt.cert)))
			res, clientErr := srv.dial(t, tt.client)
			if tt.wantOK {
				if clientErr != nil || res.err != nil {
					t.Fatalf("handshake: client %v, server %v", clientErr, res.err)
				}
				if len(res.state.PeerCertificates) != 0 {
					t.Fatal("the bootstrap server received a client certificate")
				}
				return
			}
			wantRefused(t, clientErr, res.err, nil)
			if tt.wantAs != nil && !errors.As(clientErr, tt.wantAs) {
				t.Fatalf("refused with %v, want %T", clientErr, tt.wantAs)
			}
		})
	}
}

// Tests that the bootstrap listener refuses TLS 1.2.
func TestBootstrapServerRefusesTLS12(t *testing.T) {
	t.Parallel()
	ca := pkitest.NewCA(t, "cluster.local")
	srv := startServer(t, tlsconfig.BootstrapServer(static(pkitest.SVID(t, ca, controllerID, pkitest.DNSNames(serverName)))))
	client := tlsconfig.BootstrapClient(roots(ca), serverName, controllerAuth)
	client.MinVersion, client.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	res, clientErr := srv.dial(t, client)
	wantRefused(t, res.err, clientErr, nil)
}

// Tests that a certificate of the bundle for the controller's DNS name but with another SPIFFE ID
// is refused as unauthorized: a proxy bootstraps only with the controller itself.
func TestBootstrapClientRequiresTheControllerID(t *testing.T) {
	t.Parallel()
	ca := pkitest.NewCA(t, "cluster.local")
	impostor := pkitest.SVID(t, ca, "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy", pkitest.DNSNames(serverName))
	srv := startServer(t, tlsconfig.BootstrapServer(static(impostor)))
	res, clientErr := srv.dial(t, tlsconfig.BootstrapClient(roots(ca), serverName, controllerAuth))
	wantRefused(t, clientErr, res.err, nil)
	if !errors.Is(clientErr, tlsconfig.ErrUnauthorized) {
		t.Fatalf("refused with %v, want ErrUnauthorized", clientErr)
	}
}

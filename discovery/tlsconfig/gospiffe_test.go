package tlsconfig_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	spiffetls "github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

// goSpiffeServer is the stream server as go-spiffe alone builds it: a client certificate
// required, verified and authorized by spiffetls.VerifyPeerCertificate, TLS 1.2 allowed.
func goSpiffeServer(cert *tls.Certificate, roots x509bundle.Source, authorize spiffetls.Authorizer) *tls.Config {
	return &tls.Config{
		MinVersion:            tls.VersionTLS12,
		Certificates:          []tls.Certificate{*cert},
		ClientAuth:            tls.RequireAnyClientCert,
		VerifyPeerCertificate: spiffetls.VerifyPeerCertificate(roots, authorize),
	}
}

// goSpiffeClient is a client as go-spiffe alone builds it, presenting cert when set.
func goSpiffeClient(cert *tls.Certificate, roots x509bundle.Source, authorize spiffetls.Authorizer) *tls.Config {
	cfg := &tls.Config{
		MinVersion:            tls.VersionTLS12,
		InsecureSkipVerify:    true, //nolint:gosec // verified by go-spiffe's VerifyPeerCertificate
		VerifyPeerCertificate: spiffetls.VerifyPeerCertificate(roots, authorize),
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg
}

// tls12 caps cfg at TLS 1.2.
func tls12(cfg *tls.Config) *tls.Config {
	cfg.MaxVersion = tls.VersionTLS12
	return cfg
}

// ruleCase is one rule of ours on top of go-spiffe: the same peer, accepted by the go-spiffe
// configuration and refused by ours.
type ruleCase struct {
	name string
	// server and client are go-spiffe's configuration, then ours; refuser says which end of
	// ours must refuse ("server" or "client").
	goServer, ourServer *tls.Config
	goClient, ourClient *tls.Config
	refuser             string
	wantErr             error
	wantAs              any
}

// Tests that each rule we add on top of go-spiffe refuses a peer that go-spiffe alone accepts:
// an extended key usage per direction, TLS 1.3, a SPIFFE ID with a path, and the bootstrap
// server's DNS name.
func TestOurRulesOnTopOfGoSpiffe(t *testing.T) {
	t.Parallel()
	ca := pkitest.NewCA(t, "cluster.local")
	bundle := pkitest.Bundle(ca)
	goRoots := bundle.X509Bundle(td)
	controller := pkitest.SVID(t, ca, controllerID, pkitest.DNSNames(serverName))
	proxy := pkitest.SignedSVID(t, ca, proxyID)
	anyone := tlsconfig.AuthorizeAny()
	controllerOnly := tlsconfig.AuthorizeID(spiffeid.RequireFromString(controllerID))
	ourServer := func(cert *tls.Certificate) *tls.Config {
		return tlsconfig.MTLSServer(static(cert), roots(ca), td, anyone)
	}
	ourClient := func(cert *tls.Certificate, authorize tlsconfig.Authorizer) *tls.Config {
		return tlsconfig.MTLSClient(static(cert), roots(ca), td, authorize)
	}
	serverOnly := pkitest.SVID(t, ca, proxyID, pkitest.ExtKeyUsages(x509.ExtKeyUsageServerAuth))
	emptyPath := pkitest.SVID(t, ca, "spiffe://cluster.local")
	noDNSName := pkitest.SVID(t, ca, controllerID)

	tests := []ruleCase{
		{
			name:     "a client certificate only for server auth is refused by the stream server",
			goServer: goSpiffeServer(controller, goRoots, anyone), ourServer: ourServer(controller),
			goClient: goSpiffeClient(serverOnly, goRoots, anyone), ourClient: ourClient(serverOnly, anyone),
			refuser: "server", wantAs: new(x509.CertificateInvalidError),
		},
		{
			name:     "a server certificate only for client auth (a proxy's SVID) is refused by the stream client",
			goServer: goSpiffeServer(proxy, goRoots, anyone), ourServer: ourServer(proxy),
			goClient: goSpiffeClient(controller, goRoots, anyone), ourClient: ourClient(controller, anyone),
			refuser: "client", wantAs: new(x509.CertificateInvalidError),
		},
		{
			name:     "a client with an empty SPIFFE path is refused by the stream server",
			goServer: goSpiffeServer(controller, goRoots, anyone), ourServer: ourServer(controller),
			goClient: goSpiffeClient(emptyPath, goRoots, anyone), ourClient: ourClient(emptyPath, anyone),
			refuser: "server", wantErr: spiffe.ErrEmptyPath,
		},
		{
			name:     "a server with an empty SPIFFE path is refused by the stream client",
			goServer: goSpiffeServer(emptyPath, goRoots, anyone), ourServer: ourServer(emptyPath),
			goClient: goSpiffeClient(proxy, goRoots, anyone), ourClient: ourClient(proxy, anyone),
			refuser: "client", wantErr: spiffe.ErrEmptyPath,
		},
		{
			name:     "a stream client over TLS 1.2 is refused by the stream server",
			goServer: goSpiffeServer(controller, goRoots, anyone), ourServer: ourServer(controller),
			goClient: tls12(goSpiffeClient(proxy, goRoots, anyone)), ourClient: tls12(goSpiffeClient(proxy, goRoots, anyone)),
			refuser: "server",
		},
		{
			name:     "a stream server over TLS 1.2 is refused by the stream client",
			goServer: tls12(goSpiffeServer(controller, goRoots, anyone)), ourServer: tls12(goSpiffeServer(controller, goRoots, anyone)),
			goClient: goSpiffeClient(proxy, goRoots, anyone), ourClient: ourClient(proxy, controllerOnly),
			refuser: "client",
		},
		{
			name:     "a bootstrap server with the controller's SPIFFE ID but without its DNS name is refused",
			goServer: tlsconfig.BootstrapServer(static(noDNSName)), ourServer: tlsconfig.BootstrapServer(static(noDNSName)),
			goClient: goSpiffeClient(nil, goRoots, controllerOnly), ourClient: tlsconfig.BootstrapClient(roots(ca), serverName, controllerAuth),
			refuser: "client", wantAs: new(x509.HostnameError),
		},
		{
			name:      "a bootstrap server with an empty SPIFFE path is refused even by an authorizer that accepts it",
			goServer:  tlsconfig.BootstrapServer(static(pkitest.Issue(t, ca, pkitest.URIs("spiffe://cluster.local"), pkitest.DNSNames(serverName)))),
			ourServer: tlsconfig.BootstrapServer(static(pkitest.Issue(t, ca, pkitest.URIs("spiffe://cluster.local"), pkitest.DNSNames(serverName)))),
			goClient:  goSpiffeClient(nil, goRoots, anyone), ourClient: tlsconfig.BootstrapClient(roots(ca), serverName, anyone),
			refuser: "client", wantErr: spiffe.ErrEmptyPath,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, clientErr := startServer(t, tt.goServer).dial(t, tt.goClient)
			if clientErr != nil || res.err != nil {
				t.Fatalf("go-spiffe alone refused: client %v, server %v", clientErr, res.err)
			}
			res, clientErr = startServer(t, tt.ourServer).dial(t, tt.ourClient)
			refused, other := res.err, clientErr
			if tt.refuser == "client" {
				refused, other = clientErr, res.err
			}
			wantRefused(t, refused, other, tt.wantErr)
			if tt.wantAs != nil && !errors.As(refused, tt.wantAs) {
				t.Fatalf("refused with %v, want %T", refused, tt.wantAs)
			}
		})
	}
}

// Tests that X509Source hands go-spiffe the roots of the moment for any trust domain, and the
// source's error when it holds none.
func TestX509Source(t *testing.T) {
	t.Parallel()
	ca := pkitest.NewCA(t, "cluster.local")
	bundles := tlsconfig.NewRotatingBundle(nil)
	source := tlsconfig.X509Source(bundles)
	if _, err := source.GetX509BundleForTrustDomain(td); !errors.Is(err, tlsconfig.ErrNoBundle) {
		t.Fatalf("empty source error = %v, want ErrNoBundle", err)
	}
	bundles.Set(pkitest.Bundle(ca))
	other := spiffeid.RequireTrustDomainFromString("other.example")
	for _, want := range []spiffeid.TrustDomain{td, other} {
		got, err := source.GetX509BundleForTrustDomain(want)
		if err != nil || got.TrustDomain() != want || !got.HasX509Authority(ca.Certificate()) || len(got.X509Authorities()) != 1 {
			t.Fatalf("bundle for %s = %v, %v", want, got, err)
		}
	}
	bundles.Set(pki.NewBundle(pkitest.NewCA(t, "cluster.local").Certificate()))
	if got, _ := source.GetX509BundleForTrustDomain(td); got.HasX509Authority(ca.Certificate()) {
		t.Fatal("the source kept a root the bundle dropped")
	}
}

// Tests that AuthorizeAll runs every authorizer in order and stops at the first refusal.
func TestAuthorizeAll(t *testing.T) {
	t.Parallel()
	var ran []string
	step := func(name string, err error) tlsconfig.Authorizer {
		return func(spiffeid.ID, [][]*x509.Certificate) error {
			ran = append(ran, name)
			return err
		}
	}
	refusal := errors.New("refused")
	id := spiffeid.RequireFromString(proxyID)
	if err := tlsconfig.AuthorizeAll(step("a", nil), step("b", refusal), step("c", nil))(id, nil); !errors.Is(err, refusal) {
		t.Fatalf("AuthorizeAll error = %v, want the second refusal", err)
	}
	if len(ran) != 2 || ran[0] != "a" || ran[1] != "b" {
		t.Fatalf("ran %v, want a then b", ran)
	}
	if err := tlsconfig.AuthorizeAll()(id, nil); err != nil {
		t.Fatalf("no authorizer refused with %v", err)
	}
}

// Tests that the authorizers that read the verified chain refuse a call without one.
func TestChainAuthorizersRefuseAnEmptyChain(t *testing.T) {
	t.Parallel()
	id := spiffeid.RequireFromString(controllerID)
	if err := tlsconfig.AuthorizeDNSName(serverName)(id, nil); !errors.Is(err, spiffe.ErrNoCertificate) {
		t.Fatalf("AuthorizeDNSName without a chain = %v", err)
	}
	if err := tlsconfig.AuthorizeExtKeyUsage(x509.ExtKeyUsageServerAuth)(id, nil); !errors.As(err, new(x509.CertificateInvalidError)) {
		t.Fatalf("AuthorizeExtKeyUsage without a chain = %v", err)
	}
}

// Tests the trust-domain and path authorizers on their own.
func TestIDAuthorizers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		authorize tlsconfig.Authorizer
		id        string
		wantErr   error
	}{
		{"a member of the trust domain is accepted", tlsconfig.AuthorizeMemberOf(td), proxyID, nil},
		{"an ID of another trust domain is refused", tlsconfig.AuthorizeMemberOf(td), "spiffe://evil.local/ns/prod/sa/gw", spiffe.ErrForeignTrustDomain},
		{"a workload ID is accepted", tlsconfig.AuthorizeWorkload(), proxyID, nil},
		{"a trust domain's own ID is refused as a workload", tlsconfig.AuthorizeWorkload(), "spiffe://cluster.local", spiffe.ErrEmptyPath},
		{"the controller's ServiceAccount of another trust domain is accepted", controllerAuth, "spiffe://other.example/ns/coxswain-system/sa/coxswain-controller", nil},
		{"another ServiceAccount is refused", controllerAuth, proxyID, tlsconfig.ErrUnauthorized},
		{"the exact ID is accepted", tlsconfig.AuthorizeID(spiffeid.RequireFromString(proxyID)), proxyID, nil},
		{"another ID is refused", tlsconfig.AuthorizeID(spiffeid.RequireFromString(proxyID)), controllerID, tlsconfig.ErrUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.authorize(spiffeid.RequireFromString(tt.id), nil)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

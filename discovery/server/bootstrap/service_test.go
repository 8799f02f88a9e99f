package bootstrap

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
)

func mustBundle(t *testing.T, p *servertest.PKI) *pki.Bundle {
	t.Helper()
	b, err := p.Bundle.Bundle()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func request(t *testing.T, opts ...pkitest.CSROption) *discoveryv1.BootstrapRequest {
	t.Helper()
	return &discoveryv1.BootstrapRequest{
		WireVersion: discoveryv1.WireVersion,
		Token:       pkitest.Token(sharedProxy.Namespace, sharedProxy.ServiceAccount),
		Csr:         pkitest.CSR(t, opts...),
		Scope:       cache.SharedPool().Proto(),
	}
}

// authAnswer is what the fake authenticator answers in one case.
type authAnswer struct {
	principal Principal
	err       error
}

type caUnavailable struct{}

func (caUnavailable) Current() (*pki.CA, *pki.Bundle, error) {
	return nil, nil, errors.New("CA Secret absent")
}

// Tests that every refused bootstrap carries its code, is reported with its reason and principal,
// and is counted.
func TestBootstrapRejections(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		configure  func(*Config)
		auth       authAnswer
		mutate     func(*discoveryv1.BootstrapRequest)
		code       codes.Code
		reason     Reason
		principal  Principal
		noAuthCall bool
	}{
		{
			name: "a wire version one below is refused", mutate: func(r *discoveryv1.BootstrapRequest) { r.WireVersion-- },
			code: codes.FailedPrecondition, reason: ReasonWireVersion, noAuthCall: true,
		},
		{
			name: "a wire version one above is refused", mutate: func(r *discoveryv1.BootstrapRequest) { r.WireVersion++ },
			code: codes.FailedPrecondition, reason: ReasonWireVersion, noAuthCall: true,
		},
		{
			name: "a request without a token is refused", mutate: func(r *discoveryv1.BootstrapRequest) { r.Token = "" },
			code: codes.Unauthenticated, reason: ReasonTokenMissing, noAuthCall: true,
		},
		{
			name: "a token the authenticator rejects is refused",
			auth: authAnswer{err: fmt.Errorf("%w: audience not returned", ErrUnauthenticated)},
			code: codes.Unauthenticated, reason: ReasonTokenRejected,
		},
		{
			name: "an authenticator error of no kind counts as a rejected token",
			auth: authAnswer{err: errors.New("garbage")},
			code: codes.Unauthenticated, reason: ReasonTokenRejected,
		},
		{
			name: "a token whose pod does not match the live pod is refused, naming its principal",
			auth: authAnswer{principal: sharedProxy, err: fmt.Errorf("%w: uid differs", ErrPodMismatch)},
			code: codes.PermissionDenied, reason: ReasonPodMismatch, principal: sharedProxy,
		},
		{
			name: "a token that cannot be reviewed now is refused as unavailable",
			auth: authAnswer{err: fmt.Errorf("%w: connection refused", ErrUnavailable)},
			code: codes.Unavailable, reason: ReasonReviewFailed,
		},
		{
			name: "a review without a ServiceAccount is refused",
			auth: authAnswer{principal: Principal{PodName: "p"}},
			code: codes.Unauthenticated, reason: ReasonTokenRejected,
		},
		{
			name: "an identity off the allowlist is refused",
			auth: authAnswer{principal: Principal{Namespace: "default", ServiceAccount: "default", PodName: "p"}},
			code: codes.PermissionDenied, reason: ReasonNotAllowed,
			principal: Principal{Namespace: "default", ServiceAccount: "default", PodName: "p"},
		},
		{
			name:   "a CSR with a bad signature is refused",
			mutate: func(r *discoveryv1.BootstrapRequest) { r.Csr = pkitest.CSR(t, pkitest.CorruptSignature()) },
			code:   codes.InvalidArgument, reason: ReasonInvalidCSR, principal: sharedProxy,
		},
		{
			name:   "a CSR with an RSA-1024 key is refused",
			mutate: func(r *discoveryv1.BootstrapRequest) { r.Csr = pkitest.CSR(t, pkitest.WithKeyType(pkitest.RSA1024)) },
			code:   codes.InvalidArgument, reason: ReasonInvalidCSR, principal: sharedProxy,
		},
		{
			name:   "an oversized CSR is refused",
			mutate: func(r *discoveryv1.BootstrapRequest) { r.Csr = make([]byte, pki.MaxCSRBytes+1) },
			code:   codes.InvalidArgument, reason: ReasonInvalidCSR, principal: sharedProxy,
		},
		{
			name:   "bytes that are no CSR are refused",
			mutate: func(r *discoveryv1.BootstrapRequest) { r.Csr = []byte("not a CSR") },
			code:   codes.InvalidArgument, reason: ReasonInvalidCSR, principal: sharedProxy,
		},
		{
			name:      "a request while no CA is usable is refused as unavailable",
			configure: func(c *Config) { c.CA = caUnavailable{} },
			code:      codes.Unavailable, reason: ReasonCAUnavailable, principal: sharedProxy,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			configure := func(c *Config) {
				if tc.configure != nil {
					tc.configure(c)
				}
			}
			e := newEnv(t, configure)
			if tc.auth != (authAnswer{}) {
				e.auth.principal, e.auth.err = tc.auth.principal, tc.auth.err
			}
			req := request(t)
			if tc.mutate != nil {
				tc.mutate(req)
			}
			resp, err := e.client.Bootstrap(t.Context(), req)
			if got := status.Code(err); got != tc.code || resp != nil {
				t.Fatalf("code %s (%v), want %s", got, err, tc.code)
			}
			want := []Rejection{{Principal: tc.principal, Reason: tc.reason, Code: tc.code}}
			if diff := cmp.Diff(want, e.reporter.all(), cmp.FilterPath(func(p cmp.Path) bool {
				f := p.Last().String()
				return f == ".Message" || f == ".Peer"
			}, cmp.Ignore())); diff != "" {
				t.Errorf("reports (-want +got):\n%s", diff)
			}
			if got := testutil.ToFloat64(e.svc.metrics.total.WithLabelValues(resultRejected, string(tc.reason))); got != 1 {
				t.Errorf("rejected{%s} = %v, want 1", tc.reason, got)
			}
			if got := testutil.ToFloat64(e.svc.metrics.total.WithLabelValues(resultIssued, reasonNone)); got != 0 {
				t.Errorf("issued = %v, want 0", got)
			}
			if tc.noAuthCall && e.auth.calls.Load() != 0 {
				t.Errorf("the authenticator was called %d times", e.auth.calls.Load())
			}
		})
	}
}

func issuedLeaf(t *testing.T, resp *discoveryv1.BootstrapResponse) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(resp.GetSvidChainPem())
	if block == nil {
		t.Fatal("no certificate in the SVID chain")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// Tests that an issued SVID carries only the authenticated identity, whatever the CSR asks for.
func TestBootstrapIssuesOnlyTheAuthenticatedIdentity(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		csr  []pkitest.CSROption
	}{
		{name: "a plain CSR gets the ServiceAccount SPIFFE ID"},
		{name: "extra SANs in the CSR are dropped from the issued certificate", csr: []pkitest.CSROption{
			pkitest.RequestURIs("spiffe://cluster.local/ns/kube-system/sa/admin", "spiffe://evil.test/x"),
			pkitest.RequestDNSNames("kubernetes.default.svc"),
		}},
		{name: "a CSR asking for IsCA is signed as a leaf", csr: []pkitest.CSROption{pkitest.RequestCA()}},
		{name: "a CSR with an RSA-2048 key is signed", csr: []pkitest.CSROption{pkitest.WithKeyType(pkitest.RSA2048)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			resp, err := e.client.Bootstrap(t.Context(), request(t, tc.csr...))
			if err != nil {
				t.Fatal(err)
			}
			leaf := issuedLeaf(t, resp)
			want := []*url.URL{{Scheme: "spiffe", Host: "cluster.local", Path: "/ns/coxswain-system/sa/coxswain-shared-proxy"}}
			if diff := cmp.Diff(want, leaf.URIs); diff != "" {
				t.Errorf("URI SANs (-want +got):\n%s", diff)
			}
			if len(leaf.DNSNames)+len(leaf.EmailAddresses)+len(leaf.IPAddresses) != 0 || leaf.IsCA ||
				leaf.KeyUsage != x509.KeyUsageDigitalSignature {
				t.Errorf("leaf has DNS %v, email %v, IP %v, IsCA %v, key usage %v",
					leaf.DNSNames, leaf.EmailAddresses, leaf.IPAddresses, leaf.IsCA, leaf.KeyUsage)
			}
			roots, err := pki.ParseBundlePEM(resp.GetTrustBundlePem())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("issued SVID does not verify against the returned bundle: %v", err)
			}
			if !resp.GetNotAfter().AsTime().Equal(leaf.NotAfter) {
				t.Errorf("not_after %s, leaf expires %s", resp.GetNotAfter().AsTime(), leaf.NotAfter)
			}
			if got := testutil.ToFloat64(e.svc.metrics.total.WithLabelValues(resultIssued, reasonNone)); got != 1 {
				t.Errorf("issued = %v, want 1", got)
			}
			if n := len(e.reporter.all()); n != 0 {
				t.Errorf("%d rejections reported", n)
			}
		})
	}
}

// Tests that the SVID lifetime is the configured TTL but never past the CA's own expiry.
func TestBootstrapCapsTheLifetime(t *testing.T) {
	t.Parallel()
	now := time.Now()
	t.Run("the lifetime is the configured TTL", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, func(c *Config) { c.SVIDTTL = 2 * time.Hour; c.Now = func() time.Time { return now } })
		resp, err := e.client.Bootstrap(t.Context(), request(t))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := issuedLeaf(t, resp).NotAfter, now.Add(2*time.Hour).Truncate(time.Second); !got.Equal(want) {
			t.Errorf("NotAfter %s, want %s", got, want)
		}
	})
	t.Run("the lifetime stops at the CA's expiry", func(t *testing.T) {
		t.Parallel()
		ca := pkitest.NewCAAt(t, servertest.TrustDomain, now.Add(-pkitest.CALifetime+30*time.Minute))
		e := newEnv(t, func(c *Config) { c.CA = StaticCA(ca, pkitest.Bundle(ca)) })
		resp, err := e.client.Bootstrap(t.Context(), request(t))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := issuedLeaf(t, resp).NotAfter, ca.Certificate().NotAfter; !got.Equal(want) {
			t.Errorf("NotAfter %s, want the CA's %s", got, want)
		}
	})
}

// Tests that the metrics reach the injected registry under their documented name.
func TestBootstrapRegistersItsMetric(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.client.Bootstrap(t.Context(), request(t)); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(e.registry, "coxswain_discovery_bootstrap_total"); err != nil || n != 1 {
		t.Fatalf("gathered %d series, %v", n, err)
	}
	if _, err := New(Config{TrustDomain: e.pki.TD, Authenticator: e.auth, Allowlist: allowlist{}, CA: caUnavailable{}, Registerer: e.registry}); err == nil {
		t.Fatal("a second service registered the same metric")
	}
}

// Tests that New refuses an incomplete configuration or a TTL out of bounds.
func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	p := servertest.NewPKI(t)
	good := Config{TrustDomain: p.TD, Authenticator: &fakeAuthenticator{}, Allowlist: allowlist{}, CA: caUnavailable{}}
	cases := map[string]func(*Config){
		"a missing authenticator": func(c *Config) { c.Authenticator = nil },
		"a missing allowlist":     func(c *Config) { c.Allowlist = nil },
		"a missing CA":            func(c *Config) { c.CA = nil },
		"a TTL of a second":       func(c *Config) { c.SVIDTTL = time.Second },
	}
	for name, mutate := range cases {
		cfg := good
		mutate(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s was accepted", name)
		}
	}
	if _, err := New(good); err != nil {
		t.Errorf("a good config: %v", err)
	}
}

package stream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
)

// badCertificates are client certificates no stream may accept, made with the env's CA.
func badCertificates(t *testing.T, e *env) map[string]*tls.Certificate {
	foreignCA := pkitest.NewCA(t, "cluster.local")
	foreignTD := pkitest.NewCA(t, "evil.test")
	return map[string]*tls.Certificate{
		"a certificate from a foreign CA":             pkitest.SignedSVID(t, foreignCA, sharedID),
		"a certificate of a foreign trust domain":     pkitest.SignedSVID(t, foreignTD, "spiffe://evil.test/ns/coxswain-system/sa/coxswain-shared-proxy"),
		"a certificate whose SPIFFE ID has no path":   pkitest.SVID(t, e.pki.CA, "spiffe://cluster.local"),
		"a certificate with two URI SANs":             pkitest.Issue(t, e.pki.CA, pkitest.URIs(sharedID, webID)),
		"a certificate without a URI SAN":             pkitest.Issue(t, e.pki.CA, pkitest.DNSNames("proxy.test")),
		"a certificate that expired":                  pkitest.SVID(t, e.pki.CA, sharedID, pkitest.Expired()),
		"a certificate that is not yet valid":         pkitest.SVID(t, e.pki.CA, sharedID, pkitest.NotYetValid()),
		"a certificate whose ID is no ServiceAccount": pkitest.SVID(t, e.pki.CA, "spiffe://cluster.local/workload"),
		"a certificate for server auth only":          pkitest.SVID(t, e.pki.CA, sharedID, pkitest.ExtKeyUsages(x509.ExtKeyUsageServerAuth)),
		"a CA certificate presented as a client leaf": pkitest.SVID(t, e.pki.CA, sharedID, pkitest.AsCA()),
	}
}

// permissiveTLS demands a client certificate but accepts any, standing in for a listener whose
// TLS layer fails to verify: the interceptor must still refuse.
func permissiveTLS(p *servertest.PKI) *tls.Config {
	cfg := p.StreamServerTLS()
	cfg.VerifyConnection = func(tls.ConnectionState) error { return nil }
	return cfg
}

// Tests that a stream without a valid client certificate never reaches a snapshot, whether the
// TLS handshake refuses it or, behind a permissive TLS layer, the interceptor does.
func TestStreamRefusesInvalidPeerCertificates(t *testing.T) {
	t.Parallel()
	strict := newEnv(t)
	permissive := newEnvTLS(t, permissiveTLS)
	for name, cert := range badCertificates(t, strict) {
		t.Run(name+" is refused by the strict listener", func(t *testing.T) {
			t.Parallel()
			_, err := strict.subscribeWith(t, cert).recv()
			if c := status.Code(err); c != codes.Unavailable && c != codes.PermissionDenied {
				t.Fatalf("got %v, want a failed connection or PermissionDenied", err)
			}
		})
	}
	for name, cert := range badCertificates(t, permissive) {
		t.Run(name+" is refused by the interceptor", func(t *testing.T) {
			t.Parallel()
			_, err := permissive.subscribeWith(t, cert).recv()
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("got %v, want PermissionDenied", err)
			}
		})
	}
	t.Run("a client without a certificate fails the handshake", func(t *testing.T) {
		t.Parallel()
		noCert := strict.pki.StreamClientTLS(nil)
		noCert.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil }
		_, err := open(t, strict.clientTLS(t, noCert), subscribeMessage("n", cache.SharedPool())).recv()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("got %v, want a failed connection", err)
		}
	})
	t.Cleanup(func() {
		if got := testutil.ToFloat64(permissive.srv.metrics.denied.WithLabelValues(string(ReasonNoPeerIdentity))); got != 10 {
			t.Errorf("closed{NoPeerIdentity} = %v, want 10", got)
		}
	})
}

func (e *env) subscribeWith(t *testing.T, cert *tls.Certificate) *proxy {
	t.Helper()
	return open(t, e.client(t, cert), subscribeMessage("node", cache.SharedPool()))
}

// Tests that the identity check denies, never skips, a context without a verified certificate.
func TestPeerIdentityWithoutCertificateIsDenied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := map[string]context.Context{
		"a context without a peer":          context.Background(),
		"a peer without transport security": peer.NewContext(context.Background(), &peer.Peer{}),
		"a TLS peer without a certificate":  peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{}}),
	}
	for name, ctx := range cases {
		if _, err := e.srv.peers.identity(ctx); err == nil {
			t.Errorf("%s was given an identity", name)
		}
		if _, ok := identityFrom(ctx); ok {
			t.Errorf("%s carries an identity", name)
		}
	}
}

// Tests that the stream listener serves Stream and nothing else.
func TestStreamListenerRefusesOtherMethods(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := e.client(t, e.pki.SVID(t, sharedID))
	_, err := client.Bootstrap(t.Context(), &discoveryv1.BootstrapRequest{WireVersion: discoveryv1.WireVersion, Token: "t"})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Bootstrap on the stream listener: %v, want PermissionDenied", err)
	}
	conn := servertest.Dial(t, e.addr, e.pki.StreamClientTLS(e.pki.SVID(t, sharedID)))
	if err := conn.Invoke(t.Context(), "/grpc.reflection.v1.ServerReflection/Unknown", &emptypb.Empty{}, &emptypb.Empty{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("an unknown unary method: %v, want PermissionDenied", err)
	}
	if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonMethodNotAllowed))); got != 2 {
		t.Errorf("closed{MethodNotAllowed} = %v, want 2", got)
	}
}

// Tests that the stream server cannot be built on a TLS config that lets peers in unverified.
func TestNewGRPCServerRequiresMutualTLS(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lax := e.pki.StreamServerTLS()
	lax.VerifyConnection = nil
	optional := e.pki.StreamServerTLS()
	optional.ClientAuth = tls.VerifyClientCertIfGiven
	for name, cfg := range map[string]*tls.Config{
		"no TLS config":                      nil,
		"a server-auth-only config":          e.pki.BootstrapServerTLS(),
		"any client certificate, unverified": lax,
		"an optional client certificate":     optional,
	} {
		if _, err := e.srv.NewGRPCServer(cfg); err == nil {
			t.Errorf("%s was accepted", name)
		}
	}
}

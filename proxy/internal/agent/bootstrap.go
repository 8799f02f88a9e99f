package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

// maxTokenBytes bounds the token file; projected tokens are a few kilobytes.
const maxTokenBytes = 16 << 10

// svid is an identity obtained by bootstrap. The private key lives only in Certificate.
type svid struct {
	certificate *tls.Certificate
	bundle      *pki.Bundle
	id          spiffeid.ID
	notAfter    time.Time
	// renewAt is when the agent fetches the next one.
	renewAt time.Time
}

// bootstrap reads the token and trust bundle files, generates a fresh P-256 key, and exchanges
// the token and a CSR for an SVID over TLS that verifies the controller against the bundle.
func (a *Agent) bootstrap(ctx context.Context) (*svid, error) {
	token, err := readToken(a.cfg.TokenPath)
	if err != nil {
		return nil, err
	}
	bundle, err := readBundle(a.cfg.TrustBundlePath)
	if err != nil {
		return nil, err
	}
	key, csr, err := newKeyAndCSR()
	if err != nil {
		return nil, err
	}
	resp, err := a.callBootstrap(ctx, bundle, &discoveryv1.BootstrapRequest{
		WireVersion: a.cfg.WireVersion, Token: token, Csr: csr, Scope: a.cfg.Scope.proto(),
	})
	if err != nil {
		return nil, err
	}
	s, err := parseResponse(resp, key)
	if err != nil {
		return nil, fmt.Errorf("bootstrap response: %w", err)
	}
	if now := a.cfg.Clock.Now(); !s.notAfter.After(now) {
		return nil, fmt.Errorf("bootstrap response: the SVID expired at %s, before %s", s.notAfter, now)
	}
	s.renewAt = a.renewalTime(s.notAfter)
	return s, nil
}

func (a *Agent) callBootstrap(ctx context.Context, bundle *pki.Bundle, req *discoveryv1.BootstrapRequest) (*discoveryv1.BootstrapResponse, error) {
	creds := credentials.NewTLS(tlsconfig.BootstrapClient(tlsconfig.NewRotatingBundle(bundle), a.cfg.ServerName))
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, a.cfg.DialOptions...)
	conn, err := grpc.NewClient("passthrough:///"+a.cfg.BootstrapAddress, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial bootstrap %s: %w", a.cfg.BootstrapAddress, err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, a.cfg.BootstrapTimeout)
	defer cancel()
	resp, err := discoveryv1.NewDiscoveryClient(conn).Bootstrap(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("bootstrap at %s: %w", a.cfg.BootstrapAddress, err)
	}
	return resp, nil
}

// renewalTime places the renewal at RenewFraction of the lifetime left now, ± RenewJitter, and
// no sooner than Backoff.Base, so that a controller handing out very short SVIDs is not hammered.
func (a *Agent) renewalTime(notAfter time.Time) time.Time {
	now := a.cfg.Clock.Now()
	fraction := a.cfg.RenewFraction + a.cfg.RenewJitter*(2*a.cfg.Rand()-1)
	wait := time.Duration(float64(notAfter.Sub(now)) * fraction)
	return now.Add(max(wait, a.cfg.Backoff.Base))
}

func readToken(path string) (string, error) {
	data, err := readFile(path, maxTokenBytes)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("read token: %s is empty", path)
	}
	return token, nil
}

func readBundle(path string) (*pki.Bundle, error) {
	data, err := readFile(path, pki.MaxBundleBytes)
	if err != nil {
		return nil, fmt.Errorf("read trust bundle: %w", err)
	}
	bundle, err := pki.ParseBundlePEM(data)
	if err != nil {
		return nil, fmt.Errorf("read trust bundle %s: %w", path, err)
	}
	return bundle, nil
}

// readFile reads at most limit bytes of path and refuses a longer file.
func readFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path) //nolint:gosec // the path is the operator's configuration
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}

// newKeyAndCSR generates a fresh ECDSA P-256 key and a CSR for it. The CSR names nothing: the
// controller puts the authenticated identity into the certificate whatever the CSR asks for.
func newKeyAndCSR() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CSR: %w", err)
	}
	return key, csr, nil
}

// parseResponse checks that the issued leaf certifies key and carries one workload SPIFFE ID,
// and assembles the TLS certificate.
func parseResponse(resp *discoveryv1.BootstrapResponse, key *ecdsa.PrivateKey) (*svid, error) {
	chain, err := parseChain(resp.GetSvidChainPem())
	if err != nil {
		return nil, err
	}
	leaf := chain[0]
	if !key.PublicKey.Equal(leaf.PublicKey) {
		return nil, errors.New("the SVID does not certify the key of the CSR")
	}
	if len(leaf.URIs) != 1 {
		return nil, fmt.Errorf("the SVID has %d URI SANs, want 1", len(leaf.URIs))
	}
	id, err := spiffeid.FromURI(leaf.URIs[0])
	if err != nil {
		return nil, fmt.Errorf("SVID identity: %w", err)
	}
	if _, err := spiffe.PeerID(leaf, id.TrustDomain()); err != nil {
		return nil, fmt.Errorf("SVID identity: %w", err)
	}
	bundle, err := pki.ParseBundlePEM(resp.GetTrustBundlePem())
	if err != nil {
		return nil, err
	}
	return &svid{
		certificate: tlsconfig.NewCertificate(key, chain...),
		bundle:      bundle,
		id:          id,
		notAfter:    leaf.NotAfter,
	}, nil
}

func parseChain(data []byte) ([]*x509.Certificate, error) {
	var chain []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse SVID chain: %w", err)
		}
		chain = append(chain, cert)
	}
	if len(chain) == 0 {
		return nil, errors.New("parse SVID chain: no certificate")
	}
	return chain, nil
}

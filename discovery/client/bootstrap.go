package client

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// maxTokenBytes bounds the token file.
const maxTokenBytes = 16 << 10

// ErrInvalidResponse reports a bootstrap answer that does not hold a usable SVID for our key.
var ErrInvalidResponse = errors.New("client: invalid bootstrap response")

// BootstrapConfig says where and how to bootstrap.
type BootstrapConfig struct {
	// Address is the bootstrap listener, host:port.
	Address string
	// ServerName is the DNS name the controller's serving certificate must carry.
	ServerName string
	// Controller authorizes the SPIFFE ID of the controller's serving certificate; the
	// controller's ServiceAccount in the install namespace, in any trust domain, when nil.
	Controller tlsconfig.Authorizer
	// TokenPath and BundlePath default to wellknown.TokenPath and wellknown.TrustBundlePath.
	TokenPath  string
	BundlePath string
	// Bundles, when set, is what the controller is verified against, asked at the handshake;
	// BundlePath is then not read. Without it the bundle file is read once per Bootstrap and an
	// unreadable file fails it.
	Bundles tlsconfig.BundleSource
	// Scope is the scope the proxy will subscribe to, for the controller's logs and events.
	Scope *discoveryv1.Scope
	// DialOptions are added to the connection's options (tests, custom dialers).
	DialOptions []grpc.DialOption
	// Renewing, when set, is the proxy's current SVID, presented on the bootstrap connection so
	// that the controller gives the renewal of a live proxy priority over first bootstraps. It
	// authorizes nothing: the token does.
	Renewing *tls.Certificate
}

// SVID is an issued identity: the certificate with its in-memory private key, the trust bundle
// the controller handed out and the certificate's expiry.
type SVID struct {
	Certificate *tls.Certificate
	Bundle      *pki.Bundle
	NotAfter    time.Time
}

// Bootstrap reads the token and trust bundle files, makes a fresh ECDSA P-256 key, and asks the
// controller, verified against the bundle, to sign it. The key never leaves the process. A gRPC
// status from the controller is kept in the error chain (see IsPermanent).
func Bootstrap(ctx context.Context, cfg BootstrapConfig) (*SVID, error) {
	token, bundles, err := readCredentials(cfg)
	if err != nil {
		return nil, err
	}
	key, csr, err := newCSR()
	if err != nil {
		return nil, err
	}
	resp, err := callBootstrap(ctx, cfg, bundles, &discoveryv1.BootstrapRequest{
		WireVersion: discoveryv1.WireVersion, Token: token, Csr: csr, Scope: cfg.Scope,
	})
	if err != nil {
		return nil, err
	}
	return parseResponse(resp, key)
}

// readCredentials reads the token and, unless cfg.Bundles is set, the trust bundle file.
func readCredentials(cfg BootstrapConfig) (string, tlsconfig.BundleSource, error) {
	token, err := ReadLimited(orDefault(cfg.TokenPath, wellknown.TokenPath), maxTokenBytes)
	if err != nil {
		return "", nil, fmt.Errorf("read token: %w", err)
	}
	t := strings.TrimSpace(string(token))
	if t == "" {
		return "", nil, errors.New("read token: empty")
	}
	if cfg.Bundles != nil {
		// Asked once now so that a source with nothing to trust fails before any call.
		if _, err := cfg.Bundles.Bundle(); err != nil {
			return "", nil, fmt.Errorf("trust bundle: %w", err)
		}
		return t, cfg.Bundles, nil
	}
	bundle, err := ReadBundle(orDefault(cfg.BundlePath, wellknown.TrustBundlePath))
	if err != nil {
		return "", nil, err
	}
	return t, tlsconfig.NewRotatingBundle(bundle), nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// newCSR makes a fresh key and a CSR without names: the controller names the certificate.
func newCSR() (crypto.Signer, []byte, error) {
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

func callBootstrap(ctx context.Context, cfg BootstrapConfig, bundles tlsconfig.BundleSource, req *discoveryv1.BootstrapRequest) (*discoveryv1.BootstrapResponse, error) {
	if cfg.Address == "" || cfg.ServerName == "" {
		return nil, errors.New("bootstrap: address and server name are required")
	}
	controller := cfg.Controller
	if controller == nil {
		controller = tlsconfig.AuthorizeServiceAccount(wellknown.InstallNamespace, wellknown.ControllerServiceAccount)
	}
	tlsConfig := tlsconfig.BootstrapClient(bundles, cfg.ServerName, controller)
	if cfg.Renewing != nil {
		current := cfg.Renewing
		tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return current, nil }
	}
	creds := credentials.NewTLS(tlsConfig)
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(discoveryv1.MaxBootstrapRequestBytes)),
	}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Address, opts...)
	if err != nil {
		return nil, fmt.Errorf("bootstrap %s: %w", cfg.Address, err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := discoveryv1.NewDiscoveryClient(conn).Bootstrap(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("bootstrap %s: %w", cfg.Address, err)
	}
	return resp, nil
}

// parseResponse checks that the chain is an SVID for client auth that verifies against the
// returned bundle (go-spiffe's x509svid) and is for key.
func parseResponse(resp *discoveryv1.BootstrapResponse, key crypto.Signer) (*SVID, error) {
	chain, err := parseChain(resp.GetSvidChainPem())
	if err != nil {
		return nil, err
	}
	bundle, err := pki.ParseBundlePEM(resp.GetTrustBundlePem())
	if err != nil {
		return nil, fmt.Errorf("%w: trust bundle: %w", ErrInvalidResponse, err)
	}
	leaf := chain[0]
	_, verified, err := spiffe.Verify(chain, tlsconfig.X509Source(tlsconfig.NewRotatingBundle(bundle)))
	if err == nil {
		err = spiffe.CheckExtKeyUsage(verified, x509.ExtKeyUsageClientAuth)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: certificate does not verify against the bundle: %w", ErrInvalidResponse, err)
	}
	if pub, ok := key.Public().(*ecdsa.PublicKey); !ok || !pub.Equal(leaf.PublicKey) {
		return nil, fmt.Errorf("%w: certificate is not for our key", ErrInvalidResponse)
	}
	return &SVID{Certificate: tlsconfig.NewCertificate(key, chain...), Bundle: bundle, NotAfter: leaf.NotAfter}, nil
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
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidResponse, err)
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("%w: no certificate", ErrInvalidResponse)
	}
	return chain, nil
}

// IsPermanent reports whether err is a refusal that retrying cannot fix: a wire version the
// controller does not speak (FAILED_PRECONDITION). The supervisor stops retrying on it.
func IsPermanent(err error) bool {
	return status.Code(err) == codes.FailedPrecondition
}

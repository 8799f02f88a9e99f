package stream

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

// errNoPeerCertificate reports a connection without TLS or without a client certificate.
var errNoPeerCertificate = errors.New("stream: no peer certificate")

// peerVerifier derives the Identity of a stream peer from its TLS state. It verifies the chain
// again, against the bundle of the moment, rather than trusting that the listener's TLS config
// did: a missing or unverifiable certificate is a denial, never a skip.
type peerVerifier struct {
	td      spiffeid.TrustDomain
	bundles tlsconfig.BundleSource
	now     func() time.Time
	// maxLifetime caps how long a stream may live, whatever its certificates say.
	maxLifetime time.Duration
}

func (v peerVerifier) identity(ctx context.Context) (Identity, error) {
	chain, err := peerChain(ctx)
	if err != nil {
		return Identity{}, err
	}
	if err := v.verify(chain); err != nil {
		return Identity{}, fmt.Errorf("verify peer chain: %w", err)
	}
	id, err := spiffe.PeerIDFromChain(chain, v.td)
	if err != nil {
		return Identity{}, fmt.Errorf("peer identity: %w", err)
	}
	ns, sa, err := spiffe.ParseServiceAccountID(id)
	if err != nil {
		return Identity{}, fmt.Errorf("peer identity %s: %w", id, err)
	}
	notAfter := v.now().Add(v.maxLifetime)
	for _, c := range chain {
		if c.NotAfter.Before(notAfter) {
			notAfter = c.NotAfter
		}
	}
	return Identity{ID: id, Namespace: ns, ServiceAccount: sa, NotAfter: notAfter, chain: chain}, nil
}

func peerChain(ctx context.Context) ([]*x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, errNoPeerCertificate
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil, errNoPeerCertificate
	}
	return info.State.PeerCertificates, nil
}

func (v peerVerifier) verify(chain []*x509.Certificate) error {
	bundle, err := v.bundles.Bundle()
	if err != nil {
		return err
	}
	opts := x509.VerifyOptions{
		Roots:         bundle.Pool(),
		Intermediates: x509.NewCertPool(),
		CurrentTime:   v.now(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err = chain[0].Verify(opts)
	return err
}

type identityKey struct{}

func withIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// identityFrom returns the identity the interceptor verified for this stream.
func identityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok && !id.ID.IsZero()
}

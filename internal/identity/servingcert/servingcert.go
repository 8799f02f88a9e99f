package servingcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"k8s.io/utils/clock"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/discovery/wellknown"
)

const (
	// DefaultTTL is the lifetime of a serving certificate.
	DefaultTTL = 6 * time.Hour
	// DefaultServiceAccount is the controller's ServiceAccount.
	DefaultServiceAccount = wellknown.ControllerServiceAccount
	// DefaultServiceName is the Service in front of the discovery listeners.
	DefaultServiceName = wellknown.DiscoveryServiceName
	// retryInterval is how soon a failed issuance is retried.
	retryInterval = 10 * time.Second
)

// CASource is the discovery CA: the castore.Store.
type CASource interface {
	Current() (*pki.CA, *pki.Bundle, error)
	Subscribe() <-chan struct{}
}

// Options configures a Manager. CA, TrustDomain and Namespace are required.
type Options struct {
	CA          CASource
	TrustDomain spiffeid.TrustDomain
	// Namespace is the controller namespace, where the discovery Service lives.
	Namespace      string
	ServiceAccount string
	ServiceName    string
	TTL            time.Duration
	Clock          clock.Clock
	Logger         logr.Logger
}

// Manager issues and renews the serving certificate. It implements tlsconfig.CertificateSource.
type Manager struct {
	opts     Options
	id       spiffeid.ID
	dnsNames []string
	cert     *tlsconfig.RotatingCertificate
	changes  <-chan struct{}

	mu      sync.Mutex
	issuer  []byte // raw certificate of the CA that signed the current one
	renewAt time.Time
}

var _ tlsconfig.CertificateSource = (*Manager)(nil)

// New checks opts and returns a Manager holding no certificate until Refresh or Start.
func New(opts Options) (*Manager, error) {
	if opts.CA == nil || opts.TrustDomain.IsZero() || opts.Namespace == "" {
		return nil, errors.New("servingcert: CA, trust domain and namespace are required")
	}
	opts.ServiceAccount = orDefault(opts.ServiceAccount, DefaultServiceAccount)
	opts.ServiceName = orDefault(opts.ServiceName, DefaultServiceName)
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	id, err := spiffe.ServiceAccountID(opts.TrustDomain, opts.Namespace, opts.ServiceAccount)
	if err != nil {
		return nil, fmt.Errorf("servingcert: %w", err)
	}
	return &Manager{
		opts: opts, id: id, dnsNames: DNSNames(opts.ServiceName, opts.Namespace),
		cert: tlsconfig.NewRotatingCertificate(nil), changes: opts.CA.Subscribe(),
	}, nil
}

// DNSNames are the names a client may dial the discovery Service by.
func DNSNames(service, namespace string) []string {
	return []string{
		service,
		service + "." + namespace,
		service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
	}
}

// Certificate returns the current serving certificate.
func (m *Manager) Certificate() (*tls.Certificate, error) { return m.cert.Certificate() }

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Start renews the certificate until ctx ends: at half its life, right after the CA changes, and
// soon again after a failure.
func (m *Manager) Start(ctx context.Context) error {
	for {
		wait := m.refreshOrRetry()
		timer := m.opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-m.changes:
		case <-timer.C():
		}
		timer.Stop()
	}
}

func (m *Manager) refreshOrRetry() time.Duration {
	if err := m.Refresh(); err != nil {
		m.opts.Logger.Error(err, "Failed to renew serving certificate")
		return retryInterval
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(m.renewAt.Sub(m.opts.Clock.Now()), time.Second)
}

// Refresh issues a new certificate when there is none, the CA changed, or half of its life has
// passed. It returns an error when the CA is unusable; the certificate in force stays.
func (m *Manager) Refresh() error {
	ca, _, err := m.opts.CA.Current()
	if err != nil {
		return fmt.Errorf("issue serving certificate: %w", err)
	}
	now := m.opts.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if bytes.Equal(m.issuer, ca.Certificate().Raw) && now.Before(m.renewAt) {
		return nil
	}
	return m.issueLocked(ca, now)
}

func (m *Manager) issueLocked(ca *pki.CA, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate serving key: %w", err)
	}
	leaf, _, err := ca.IssueServerCert(key.Public(), m.id, m.dnsNames, m.opts.TTL, now)
	if err != nil {
		return fmt.Errorf("issue serving certificate: %w", err)
	}
	chain := []*x509.Certificate{leaf}
	if !bytes.Equal(ca.Certificate().RawIssuer, ca.Certificate().RawSubject) {
		chain = append(chain, ca.Certificate())
	}
	m.cert.Set(tlsconfig.NewCertificate(key, chain...))
	m.issuer = ca.Certificate().Raw
	m.renewAt = leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2)
	m.opts.Logger.Info("Issued serving certificate", "spiffeID", m.id.String(), "notAfter", leaf.NotAfter, "renewAt", m.renewAt)
	return nil
}

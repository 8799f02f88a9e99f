package kubelet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
)

// Port is the kubelet API's port.
const Port = 10250

// Logs finds container log files (the pod controller).
type Logs interface {
	LogFile(namespace, pod, container string, previous bool) (path string, live func() bool, err error)
}

// Config says where to listen and whom to trust.
type Config struct {
	// Address is the node's address; the server listens on it, port Port, and its
	// self-signed serving certificate names it.
	Address string
	// Node is the Node's name, the object SubjectAccessReviews ask about.
	Node string
	// ClientCA is the file of the CA whose client certificates are accepted.
	ClientCA string
	Logs     Logs
}

// Server is the kubelet API of the node.
type Server struct {
	cfg    Config
	client kubernetes.Interface
	log    logr.Logger
	now    func() time.Time
}

// New returns a Server; client runs its SubjectAccessReviews.
func New(client kubernetes.Interface, cfg Config, log logr.Logger) *Server {
	return &Server{cfg: cfg, client: client, log: log.WithName("kubelet"), now: time.Now}
}

// Run listens and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	tlsConfig, err := s.tlsConfig()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(s.cfg.Address, fmt.Sprint(Port))
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("kubelet API: %w", err)
	}
	srv := &http.Server{
		Handler: s.handler(), TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(l, "", "") }()
	s.log.Info("Serving the kubelet API", "address", addr)
	select {
	case err := <-done:
		return fmt.Errorf("kubelet API: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown) // followers end with ctx; what is left is cut
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("kubelet API: %w", err)
	}
	return nil
}

// tlsConfig asks for a client certificate of the CA (checked per request, so a client without
// one gets a 401 rather than a failed handshake) and serves a fresh self-signed certificate:
// the API server does not verify kubelet serving certificates unless given
// --kubelet-certificate-authority.
func (s *Server) tlsConfig() (*tls.Config, error) {
	caPEM, err := os.ReadFile(s.cfg.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("read the kubelet API's client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in the kubelet API's client CA file %s", s.cfg.ClientCA)
	}
	cert, err := selfSigned(s.cfg.Node, s.cfg.Address)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    pool,
	}, nil
}

func selfSigned(node, address string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate kubelet serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kubelet serving certificate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: node},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{node},
	}
	if ip := net.ParseIP(address); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("sign kubelet serving certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

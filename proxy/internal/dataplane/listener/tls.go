package listener

import (
	"crypto/tls"
	"errors"

	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// errNoCertificate fails a handshake on a port the current table does not serve over HTTPS.
var errNoCertificate = errors.New("no certificate for this port")

// cipherSuites are the TLS 1.2 suites offered: forward-secret AEADs only. TLS 1.3 suites are
// not configurable and all modern.
var cipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// tlsConfig returns the server config of an HTTPS port: TLS 1.2 or later, ALPN h2 and
// http/1.1, and a certificate chosen per handshake from the handler's current table. A
// handshake whose virtual host validates client certificates gets a config that asks for one
// (see clientAuthConfig).
func tlsConfig(h *forward.Handler, port uint32) *tls.Config {
	base := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: cipherSuites,
		NextProtos:   []string{"h2", "http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return certificate(h.Current(), port, hello)
		},
	}
	base.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		return clientAuthConfig(base, h.Current(), port, hello), nil
	}
	return base
}

// clientAuthConfig returns the config of a handshake whose virtual host, chosen by server name
// as for the certificate, belongs to a listener that validates client certificates; nil, which
// keeps base, for any other. The client must present a certificate that chains to the
// listener's roots (for client authentication), else the handshake fails; with
// InsecureFallback it is asked for one and let through whatever it presents. The certificate
// comes from the same table as the validation. Session tickets are off: a resumed session
// would skip the verification against the roots of the moment.
func clientAuthConfig(base *tls.Config, st *forward.State, port uint32, hello *tls.ClientHelloInfo) *tls.Config {
	if st == nil {
		return nil
	}
	p, ok := st.Table.Port(port)
	if !ok || p.Protocol != router.HTTPS {
		return nil
	}
	v := p.ClientValidation(p.CertificateVirtualHost(hello.ServerName))
	if v == nil {
		return nil
	}
	cfg := base.Clone()
	cfg.GetConfigForClient = nil
	cfg.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return certificate(st, port, hello)
	}
	cfg.ClientCAs = v.Roots
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	if v.InsecureFallback {
		cfg.ClientAuth = tls.RequestClientCert
	}
	cfg.SessionTicketsDisabled = true
	return cfg
}

// certificate picks the certificate for a handshake: the virtual host serving the server name
// (exact before wildcard), else the port's default; among that virtual host's certificates,
// the first the client supports (an ECDSA and an RSA certificate may be configured together).
func certificate(st *forward.State, port uint32, hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if st == nil {
		return nil, errNoCertificate
	}
	p, ok := st.Table.Port(port)
	if !ok || p.Protocol != router.HTTPS {
		return nil, errNoCertificate
	}
	vh := p.CertificateVirtualHost(hello.ServerName)
	if vh == nil || len(vh.Certificates) == 0 {
		return nil, errNoCertificate
	}
	return pickCertificate(vh.Certificates, hello), nil
}

// pickCertificate returns the first of certs (never empty) the client supports (an ECDSA and
// an RSA certificate may be configured together), else the first.
func pickCertificate(certs []*router.Certificate, hello *tls.ClientHelloInfo) *tls.Certificate {
	for _, c := range certs {
		if hello.SupportsCertificate(c.TLS) == nil {
			return c.TLS
		}
	}
	return certs[0].TLS
}

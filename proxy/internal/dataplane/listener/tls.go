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
// http/1.1, and a certificate chosen per handshake from the handler's current table.
func tlsConfig(h *forward.Handler, port uint32) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: cipherSuites,
		NextProtos:   []string{"h2", "http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return certificate(h.Current(), port, hello)
		},
	}
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
	for _, c := range vh.Certificates {
		if hello.SupportsCertificate(c.TLS) == nil {
			return c.TLS, nil
		}
	}
	return vh.Certificates[0].TLS, nil
}

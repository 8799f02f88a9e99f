package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// errPlainMetrics refuses plain HTTP metrics on an address other pods can reach.
var errPlainMetrics = errors.New("coxswain: plain HTTP metrics are served only on a loopback address")

// metricsFlags say where and how the controller serves its metrics. The metrics name every
// dedicated Gateway (the scope label of coxswain_discovery_connected_proxies, for one), so by
// default only a caller the API server authenticates and authorizes may read them.
type metricsFlags struct {
	addr    string
	secure  bool
	certDir string
}

func (m *metricsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.addr, "metrics-bind-address", ":8443", "Address of the metrics endpoint; 0 disables it.")
	fs.BoolVar(&m.secure, "metrics-secure", true,
		"Serve metrics over HTTPS only to callers whose bearer token the API server authenticates (TokenReview) and "+
			"authorizes for get on the non-resource URL /metrics (SubjectAccessReview); false serves plain HTTP to anyone, "+
			"and is refused unless --metrics-bind-address is a loopback address.")
	fs.StringVar(&m.certDir, "metrics-cert-dir", "",
		"Directory whose tls.crt and tls.key the HTTPS metrics endpoint serves, reloaded when they change; "+
			"empty serves a self-signed certificate made in memory at start.")
}

// options returns the manager's metrics server options: HTTPS (TLS 1.2 or later, HTTP/1.1
// only, as Kubebuilder scaffolds it) behind controller-runtime's authentication and
// authorization filter, or plain HTTP on loopback when asked for.
func (m *metricsFlags) options() (metricsserver.Options, error) {
	if m.addr == "0" {
		return metricsserver.Options{BindAddress: "0"}, nil
	}
	if !m.secure {
		if !loopbackAddress(m.addr) {
			return metricsserver.Options{}, fmt.Errorf("--metrics-bind-address=%s with --metrics-secure=false: %w", m.addr, errPlainMetrics)
		}
		return metricsserver.Options{BindAddress: m.addr}, nil
	}
	return metricsserver.Options{
		BindAddress:    m.addr,
		SecureServing:  true,
		CertDir:        m.certDir,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.MinVersion = tls.VersionTLS12
			c.NextProtos = []string{"http/1.1"} // HTTP/2 rapid reset (CVE-2023-44487) needs no exposure here
		}},
	}, nil
}

// loopbackAddress reports whether a host:port binds only loopback: "localhost", 127.0.0.0/8
// or ::1. An empty host binds every address.
func loopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

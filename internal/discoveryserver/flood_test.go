package discoveryserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// Tests against a controller replica and the real API server that 64 source addresses holding
// 16 idle TLS connections each, the bootstrap listener's whole cap, leave a proxy its renewal:
// the proxy agent's own client, presenting its current SVID, gets a new one, while a first
// bootstrap (no SVID) is refused at the end of its handshake and one more idle connection is
// closed there.
func TestAnIdleTLSFloodLeavesAProxyItsRenewal(t *testing.T) {
	ns := newNamespace(t, "bootstrap-flood")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: wellknown.SharedProxyServiceAccount}}
	if _, err := clientset.CoreV1().ServiceAccounts(ns).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := startController(t, ns, testSettings(t))
	addrs := c.waitListening(t, serving)
	c.waitCondition(t, v1alpha1.ConditionTrustBundlePublished, metav1.ConditionTrue, "Published")
	cfg := client.BootstrapConfig{
		Address: addrs.Bootstrap, ServerName: wellknown.DiscoveryServiceName + "." + ns + ".svc",
		Controller: tlsconfig.AuthorizeServiceAccount(ns, wellknown.ControllerServiceAccount),
		TokenPath:  writeToken(t, ns, wellknown.SharedProxyServiceAccount), BundlePath: writeTrustBundle(t, ns),
		Scope: &discoveryv1.Scope{Kind: &discoveryv1.Scope_SharedPool{SharedPool: &discoveryv1.SharedPool{}}},
	}
	first, err := client.Bootstrap(t.Context(), cfg)
	if err != nil {
		t.Fatalf("first bootstrap: %v", err)
	}

	perSource := bootstrap.DefaultMaxConnectionsPerSource
	for i := range bootstrap.DefaultMaxConnections / perSource {
		for range perSource {
			idleTLS(t, addrs.Bootstrap, fmt.Sprintf("127.0.7.%d", i+1))
		}
	}
	eventually(t, 30*time.Second, "one more idle connection to be closed", func() bool {
		conn, err := dialIdleTLS(t.Context(), addrs.Bootstrap, "127.0.8.1")
		if err != nil {
			return true
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		_, err = conn.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	})

	renewing := cfg
	renewing.Renewing = first.Certificate
	renewing.DialOptions = []grpc.DialOption{fromSource("127.0.9.1")}
	if _, err := client.Bootstrap(t.Context(), renewing); err != nil {
		t.Fatalf("renewal during the flood: %v", err)
	}
	fresh := cfg
	fresh.DialOptions = []grpc.DialOption{fromSource("127.0.9.2")}
	if _, err := client.Bootstrap(t.Context(), fresh); status.Code(err) != codes.Unavailable {
		t.Fatalf("first bootstrap during the flood: %v, want Unavailable", err)
	}
}

// idleTLS opens a TLS connection to addr from source that sends the HTTP/2 preface and nothing
// more, closed when the test ends.
func idleTLS(t *testing.T, addr, source string) net.Conn {
	t.Helper()
	conn, err := dialIdleTLS(t.Context(), addr, source)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func dialIdleTLS(ctx context.Context, addr, source string) (net.Conn, error) {
	d := tls.Dialer{
		NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}},
		// A flood does not care whom it talks to.
		Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13}, //nolint:gosec // see above
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial from %s: %w", source, err)
	}
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// fromSource dials from source, a loopback address.
func fromSource(source string) grpc.DialOption {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	})
}

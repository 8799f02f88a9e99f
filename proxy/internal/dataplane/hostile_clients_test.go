package dataplane_test

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
)

// Tests that one client address cannot take the whole connection limit: its connections beyond
// its share are closed on accept and counted, while another client still connects and is
// served, and a place the client gives back can be taken again.
func TestOneClientTakesOnlyItsShareOfConnections(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, Listener: listener.Options{MaxConnections: 8, MaxConnectionsPerClient: 2}})
	proxy := routeAll(t, d, hostPort(app))

	var held []net.Conn
	for range 2 {
		c, br := rawConnFrom(t, "127.0.0.1", proxy)
		if resp, _ := roundTrip(t, c, br, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("a connection within the share got %d", resp.StatusCode)
		}
		held = append(held, c)
	}
	extra, _ := rawConnFrom(t, "127.0.0.1", proxy)
	if !closedByPeer(extra, 2*time.Second) {
		t.Fatal("a third connection of one client was kept with a share of two")
	}
	if got := metricValue(t, reg, "coxswain_proxy_refused_client_connections_total", ""); got != 1 {
		t.Errorf("refused client connections counted %v, want 1", got)
	}
	if got := metricValue(t, reg, "coxswain_proxy_refused_connections_total", ""); got != 0 {
		t.Errorf("the connection limit counted %v refusals, want 0: the share refused it", got)
	}

	other, br := rawConnFrom(t, "127.0.0.2", proxy)
	if resp, _ := roundTrip(t, other, br, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
		t.Errorf("another client got %d while the first held its share", resp.StatusCode)
	}

	_ = held[0].Close()
	eventually(t, "the place given back is taken again", func() bool {
		c, br := rawConnFrom(t, "127.0.0.1", proxy)
		defer func() { _ = c.Close() }()
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return false
		}
		line, err := br.ReadString('\n')
		return err == nil && line == "HTTP/1.1 200 OK\r\n"
	})
}

// rawConnFrom dials the proxy from the loopback address local, one client address of several a
// test can use.
func rawConnFrom(t *testing.T, local, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	d := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

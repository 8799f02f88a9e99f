package dataplane_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// Tests the downstream timeouts: a connection that sends half a request header is closed after
// the read timeout, an idle keep-alive connection after the idle timeout, and a request slower
// than both at its backend is not cut.
func TestDownstreamTimeouts(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	d := start(t, dataplane.Options{Listener: listener.Options{HeaderReadTimeout: 200 * time.Millisecond, IdleTimeout: 400 * time.Millisecond}})
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/"), "ns/app:80"))),
		snaptest.Cluster(t, "ns/app:80", hostPort(app)))
	proxy := addr(t, d, 80)
	dial := func(t *testing.T) net.Conn {
		c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	closedWithin := func(t *testing.T, c net.Conn, bound time.Duration) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(bound))
		_, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("still open after %s", bound)
		}
	}
	t.Run("a half-sent request header is cut after the read timeout", func(t *testing.T) {
		t.Parallel()
		c := dial(t)
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n")
		closedWithin(t, c, 2*time.Second)
	})
	t.Run("an idle connection is closed after the idle timeout", func(t *testing.T) {
		t.Parallel()
		closedWithin(t, dial(t), 2*time.Second)
	})
	t.Run("a slow backend is not cut by the downstream timeouts", func(t *testing.T) {
		t.Parallel()
		if r := do(t, client(proxy), "GET", "http://x/", "X-Sleep: 900ms"); r.status != 200 {
			t.Errorf("got %d", r.status)
		}
	})
}

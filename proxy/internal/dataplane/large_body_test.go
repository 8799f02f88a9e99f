package dataplane_test

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
)

// Tests responses of a declared length large enough for the engine to move them itself (on
// the native engine over plain TCP, splice(2) between the backend's and the client's sockets):
// the bytes arrive whole and in order, a backend that trickles steadily is not taken for a
// stalled one, and a stalled backend, a backend that closes early and a client that stops
// reading end the response as the copy does.
func TestLargeBodiesOfDeclaredLength(t *testing.T) {
	t.Parallel()
	const size = 8 << 20
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", strconv.Itoa(size))
			_, _ = io.Copy(w, io.LimitReader(&pattern{}, size))
		case "/trickle": // 1 MiB in 64 pieces of 16 KiB, one every 20 ms: 1.3 s in all
			w.Header().Set("Content-Length", strconv.Itoa(1<<20))
			p := &pattern{}
			for range 64 {
				_, _ = io.Copy(w, io.LimitReader(p, 16<<10))
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
			}
		case "/huge": // more than the sockets and pipes between backend and client can hold
			w.Header().Set("Content-Length", strconv.Itoa(1<<30))
			_, _ = io.Copy(w, io.LimitReader(&pattern{}, 1<<30))
		case "/stall":
			w.Header().Set("Content-Length", strconv.Itoa(size))
			_, _ = io.Copy(w, io.LimitReader(&pattern{}, 256<<10))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case "/short":
			w.Header().Set("Content-Length", strconv.Itoa(size))
			_, _ = io.Copy(w, io.LimitReader(&pattern{}, 256<<10))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection closes short of the length
		}
	}))
	t.Cleanup(srv.Close)
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, Forward: forward.Options{
		BackendIdleTimeout: 300 * time.Millisecond, SendTimeout: 300 * time.Millisecond,
	}})
	proxy := routeAll(t, d, hostPort(srv))
	refused := func(reason string) float64 {
		return metricValue(t, reg, "coxswain_proxy_refused_requests_total", reason)
	}
	get := func(path string) ([]byte, error) {
		resp, err := client(proxy).Get("http://x" + path)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		return io.ReadAll(resp.Body)
	}
	digest := func(n int64) []byte {
		h := sha256.New()
		_, _ = io.Copy(h, io.LimitReader(&pattern{}, n))
		return h.Sum(nil)
	}

	t.Run("a large body arrives whole", func(t *testing.T) {
		for range 3 { // on one kept-alive connection to the backend, reused after each
			body, err := get("/big")
			if sum := sha256.Sum256(body); err != nil || len(body) != size || !bytes.Equal(sum[:], digest(size)) {
				t.Fatalf("got %d bytes, %v; want %d bytes of the pattern", len(body), err, size)
			}
		}
	})
	t.Run("a backend that trickles past the idle timeout is not cut", func(t *testing.T) {
		body, err := get("/trickle")
		if sum := sha256.Sum256(body); err != nil || !bytes.Equal(sum[:], digest(1<<20)) {
			t.Fatalf("got %d bytes, %v; want 1 MiB of the pattern", len(body), err)
		}
	})
	t.Run("a stalled backend is cut", func(t *testing.T) {
		before := refused("upstream_body_error")
		if body, err := get("/stall"); err == nil {
			t.Fatalf("a stalled response was read as complete (%d bytes)", len(body))
		}
		eventually(t, "upstream_body_error is counted", func() bool { return refused("upstream_body_error") > before })
	})
	t.Run("a backend that closes early is not complete", func(t *testing.T) {
		if body, err := get("/short"); err == nil {
			t.Fatalf("a cut response was read as complete (%d bytes)", len(body))
		}
	})
	t.Run("a client that stops reading is given up", func(t *testing.T) {
		before := refused("send_error")
		c, _ := rawConn(t, proxy)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		// Not /big: on loopback the kernel's autotuned buffers (the client's and the proxy's
		// sockets, the backend's, a splice pipe) can take all 8 MiB of it, and the proxy then
		// finishes a response the client never reads without ever waiting on a send.
		_, _ = io.WriteString(c, "GET /huge HTTP/1.1\r\nHost: x\r\n\r\n")
		eventually(t, "send_error is counted", func() bool { return refused("send_error") > before })
	})
}

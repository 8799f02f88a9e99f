package dataplane_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// benchRequest is the request BenchmarkServe sends, and benchAnswer the backend's answer: 100
// bytes of body.
var (
	benchRequest = []byte("GET /bench HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: bench\r\n\r\n")
	benchAnswer  = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n" + string(bytes.Repeat([]byte("b"), 100)))
)

// BenchmarkServe sends one 100-byte exchange at a time over a keep-alive connection through the
// real listener, the handler and the upstream pool to a keep-alive backend on loopback, for each
// HTTP/1.1 engine. The client and the backend are written over raw sockets and allocate nothing
// per request, so allocs/op is the proxy's own; engine=none, the client straight to the backend,
// shows that.
func BenchmarkServe(b *testing.B) {
	backendAddr := benchBackend(b)
	b.Run("engine=none", func(b *testing.B) { benchExchanges(b, backendAddr) })
	for _, e := range http1.Engines {
		b.Run("engine="+string(e), func(b *testing.B) {
			// One connection for the whole run: the request cap would close it every 10,000.
			d, err := dataplane.New(logr.Discard(), dataplane.Options{
				HTTP1Engine: e, Listener: listenOn127(), Forward: forward.Options{MaxRequestsPerConnection: math.MaxInt32},
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = d.Shutdown(ctx)
			})
			set := snaptest.Set(b, "bench", snaptest.HTTP("bench/gw", 80, snaptest.VHost("http", "", snaptest.Route("bench/r/0/0", "", snaptest.Prefix("/"), "bench/app:80"))),
				snaptest.Cluster(b, "bench/app:80", backendAddr))
			if err := d.Apply(context.Background(), set); err != nil {
				b.Fatal(err)
			}
			proxy, _ := d.Addr(80)
			benchExchanges(b, proxy)
		})
	}
}

// benchExchanges runs b.N exchanges with addr over one connection.
func benchExchanges(b *testing.B, addr string) {
	b.Helper()
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	buf := make([]byte, 64<<10)
	exchange := func() {
		if _, err := c.Write(benchRequest); err != nil {
			b.Fatal(err)
		}
		if err := readAnswer(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	exchange() // the first dials the backend
	b.ReportAllocs()
	for b.Loop() {
		exchange()
	}
}

var contentLength = []byte("\r\nContent-Length: ")

// readAnswer reads one response with a Content-Length into buf, without allocating.
func readAnswer(c net.Conn, buf []byte) error {
	n := 0
	for {
		m, err := c.Read(buf[n:])
		if err != nil {
			return err
		}
		n += m
		end := bytes.Index(buf[:n], []byte("\r\n\r\n"))
		if end < 0 {
			continue
		}
		i := bytes.Index(buf[:end], contentLength)
		if i < 0 {
			return errors.New("an answer without Content-Length")
		}
		j := i + len(contentLength)
		k := j + bytes.IndexByte(buf[j:end+2], '\r')
		length, err := strconv.Atoi(string(buf[j:k]))
		if err != nil {
			return err
		}
		for n < end+4+length {
			m, err := c.Read(buf[n:])
			if err != nil {
				return err
			}
			n += m
		}
		if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200 ")) {
			return errors.New("an answer that is not 200")
		}
		return nil
	}
}

// benchBackend serves benchAnswer to every request head on every connection, over raw sockets
// and with no allocation per request; requests have no body.
func benchBackend(b *testing.B) string {
	b.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go answerHeads(c)
		}
	}()
	return ln.Addr().String()
}

func answerHeads(c net.Conn) {
	defer func() { _ = c.Close() }()
	buf := make([]byte, 64<<10)
	n := 0
	for {
		m, err := c.Read(buf[n:])
		if err != nil {
			return
		}
		n += m
		for {
			end := bytes.Index(buf[:n], []byte("\r\n\r\n"))
			if end < 0 {
				break
			}
			if _, err := c.Write(benchAnswer); err != nil {
				return
			}
			n = copy(buf, buf[end+4:n])
		}
		if n == len(buf) {
			return
		}
	}
}

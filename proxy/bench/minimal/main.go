// Command minimal is the benchmark's reference for the HTTP engine alone: a net/http server
// whose every request goes through httputil.ReverseProxy to one backend over a keep-alive
// Transport, with no routing table, filters, metrics or timeouts; bodies are copied in 32 KiB
// chunks as the data plane copies them. The gap between it and the data plane is what the data
// plane's features cost; the gap between it and nginx is the engine's.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"time"
)

// bufferPool hands ReverseProxy 32 KiB copy buffers.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(v []byte) { b.p.Put(&v) }

func main() {
	addr := flag.String("http", "127.0.0.1:18081", "listener address")
	backend := flag.String("backend", "127.0.0.1:18080", "backend address")
	flag.Parse()
	target := &url.URL{Scheme: "http", Host: *backend}
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
			r.SetXForwarded()
		},
		Transport:  transport,
		BufferPool: &bufferPool{},
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

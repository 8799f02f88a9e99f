// Command minimal is the benchmark's reference for the HTTP engine alone: a fasthttp server
// that forwards every request to one backend over a keep-alive client, with no routing table,
// filters, forwarding headers, metrics or timeouts. The gap between it and the data plane is
// what the data plane's features cost; the gap between it and nginx is the engine's.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/valyala/fasthttp"
)

func main() {
	addr := flag.String("http", "127.0.0.1:18081", "listener address")
	backend := flag.String("backend", "127.0.0.1:18080", "backend address")
	flag.Parse()
	client := &fasthttp.HostClient{Addr: *backend, MaxConns: 1024, NoDefaultUserAgentHeader: true}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if err := client.Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.Error("bad gateway", fasthttp.StatusBadGateway)
			}
		},
		NoDefaultServerHeader: true,
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

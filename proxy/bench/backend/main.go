// Command backend is the upstream of the data plane benchmark: a fasthttp server on one
// address that answers every request with 200 and a fixed body of the size asked for.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/valyala/fasthttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18080", "address to listen on (loopback only)")
	size := flag.Int("body", 100, "response body size in bytes")
	flag.Parse()
	body := bytes.Repeat([]byte("x"), *size)
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/plain")
			ctx.SetBody(body)
		},
		NoDefaultServerHeader: true,
	}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// Command backend is the upstream of the data plane benchmark: a fasthttp server on one
// address that answers every request with 200 and a fixed body of the size asked for, after
// reading and discarding the request body as it streams in (for the upload scenarios). A GET
// of ReceivedPath answers the request body bytes read so far, in decimal: the runner asks it
// directly, before and after a run, to count uploads by the bytes that reached the backend.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// ReceivedPath is the path whose answer is the count of request body bytes read so far.
const ReceivedPath = "/.bench/received-bytes"

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
	var received atomic.Int64
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == ReceivedPath {
				ctx.SetBodyString(strconv.FormatInt(received.Load(), 10))
				return
			}
			if s := ctx.RequestBodyStream(); s != nil {
				n, err := io.Copy(io.Discard, s)
				received.Add(n)
				if err != nil {
					ctx.Error("reading the body: "+err.Error(), fasthttp.StatusBadRequest)
					return
				}
			} else {
				received.Add(int64(len(ctx.PostBody())))
			}
			ctx.SetContentType("text/plain")
			// The shared body is written straight from this slice, never copied per response:
			// a 100 MiB body costs the backend one write, not a copy and a write.
			ctx.Response.SetBodyRaw(body)
		},
		NoDefaultServerHeader: true,
		// Request bodies stream to the handler instead of being buffered whole.
		StreamRequestBody:  true,
		MaxRequestBodySize: 1 << 40,
		ReadBufferSize:     16 << 10,
		WriteBufferSize:    32 << 10,
	}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

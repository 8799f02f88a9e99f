package h1server

import (
	"bufio"
	"io"
	"net/http"
	"testing"
)

// BenchmarkServer measures one keep-alive exchange of a 100-byte response over loopback with
// the native server and net/http's, the client's cost included (a raw client without
// allocations of its own per exchange).
func BenchmarkServer(b *testing.B) {
	body := make([]byte, 100)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.Header()["Content-Type"] = nil
		_, _ = w.Write(body)
	})
	b.Run("server=native", func(b *testing.B) {
		benchExchanges(b, serve(b, h, Options{}).ln.Addr().String())
	})
	b.Run("server=nethttp", func(b *testing.B) {
		benchExchanges(b, serveNetHTTP(b, h))
	})
}

// benchExchanges runs b.N exchanges over one connection to addr.
func benchExchanges(b *testing.B, addr string) {
	c := dialAddr(b, addr)
	req := []byte("GET /bench HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	br := bufio.NewReaderSize(c, 4096)
	// The response is a 100-byte body after a head that ends in an empty line.
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
			}
			if len(line) == 2 {
				break
			}
		}
		if _, err := io.CopyN(io.Discard, br, 100); err != nil {
			b.Fatal(err)
		}
	}
}

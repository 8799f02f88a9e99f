package h1client

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkRoundTrip measures a GET with a 100-byte answer over one kept-alive loopback
// connection, with this client and with Go's Transport; the backend's own cost is in both.
func BenchmarkRoundTrip(b *testing.B) {
	resp := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n" + repeat("x", 100)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				br := bufio.NewReader(c)
				for {
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) == 2 {
							break
						}
					}
					if _, err := io.WriteString(c, resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	addr := ln.Addr().String()
	native := New(Options{Address: addr})
	defer native.CloseIdleConnections()
	std := &http.Transport{DisableCompression: true}
	defer std.CloseIdleConnections()
	for name, rt := range map[string]http.RoundTripper{"native": native, "nethttp": std} {
		b.Run(name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			buf := make([]byte, 512)
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
				req.Header["User-Agent"] = nil
				r, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := r.Body.Read(buf); err != nil {
						break
					}
				}
				_ = r.Body.Close()
			}
		})
	}
}

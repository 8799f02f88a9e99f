package h1client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// sink is a TCP connection whose peer collects what it receives.
func sink(t *testing.T) (*net.TCPConn, <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(c)
		_ = c.Close()
		got <- b
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn), got
}

// Tests that io.Copy from a Content-Length body to a TCP connection moves the body whole
// (through the connection's ReadFrom, which splices), reuses the backend connection after,
// and that a body cut short is an error.
func TestWriteToTCP(t *testing.T) {
	t.Parallel()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if r.URL.Path == "/cut" {
				_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(payload))
				_, _ = c.Write(payload[:len(payload)/2])
				return
			}
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(payload))
			_, _ = c.Write(payload)
		}
	})
	tr := newTransport(t, Options{Address: be.addr()})
	for i := range 2 {
		resp, err := tr.RoundTrip(mustRequest(t, http.MethodGet, "http://x/", nil))
		if err != nil {
			t.Fatal(err)
		}
		dst, got := sink(t)
		n, err := io.Copy(dst, resp.Body)
		_ = resp.Body.Close()
		_ = dst.Close()
		if err != nil || n != int64(len(payload)) || !bytes.Equal(<-got, payload) {
			t.Fatalf("copy %d: %d bytes, %v; want the whole %d", i, n, err, len(payload))
		}
	}
	if n := be.accepted.Load(); n != 1 {
		t.Errorf("%d backend connections, want the one reused", n)
	}
	resp, err := tr.RoundTrip(mustRequest(t, http.MethodGet, "http://x/cut", nil))
	if err != nil {
		t.Fatal(err)
	}
	dst, got := sink(t)
	_, err = io.Copy(dst, resp.Body)
	_ = resp.Body.Close()
	_ = dst.Close()
	<-got
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a cut body copied with %v, want io.ErrUnexpectedEOF", err)
	}
}

package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The oracle of the request fuzz target: Go's net/http.Server, the current engine's front end,
// serving one in-memory connection per input. The connection reads the input, then EOF (a
// client that half-closed), and records what the server writes. A recording handler keeps
// every request the server hands it and answers 200 with X-Oracle; any other response is one
// the server wrote itself: a refusal.

// oracleRequest is what net/http made of one request.
type oracleRequest struct {
	Method, RequestURI, Host string
	ProtoMajor, ProtoMinor   int
	Header                   http.Header
	ContentLength            int64
	Chunked, Close           bool
}

// oracleConn is a net.Conn over the input bytes that records the server's writes and the
// requests its handler saw.
type oracleConn struct {
	mu      sync.Mutex
	in      *bytes.Reader
	out     bytes.Buffer
	handled []oracleRequest
	once    sync.Once
	closed  chan struct{}
}

func (c *oracleConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.in.Read(p)
}

func (c *oracleConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}

func (c *oracleConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *oracleConn) LocalAddr() net.Addr              { return oracleAddr{} }
func (c *oracleConn) RemoteAddr() net.Addr             { return oracleAddr{} }
func (c *oracleConn) SetDeadline(time.Time) error      { return nil }
func (c *oracleConn) SetReadDeadline(time.Time) error  { return nil }
func (c *oracleConn) SetWriteDeadline(time.Time) error { return nil }

type oracleAddr struct{}

func (oracleAddr) Network() string { return "memory" }
func (oracleAddr) String() string  { return "192.0.2.1:1234" }

// oracleListener hands the server the connections of oracleServe.
type oracleListener struct{ conns chan net.Conn }

func (l oracleListener) Accept() (net.Conn, error) {
	c, ok := <-l.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (l oracleListener) Close() error   { return nil }
func (l oracleListener) Addr() net.Addr { return oracleAddr{} }

type oracleConnKey struct{}

var (
	oracleOnce  sync.Once
	oracleConns = make(chan net.Conn)
)

// startOracle starts the server once per process.
func startOracle() {
	srv := &http.Server{
		Handler:                      http.HandlerFunc(oracleRecord),
		ReadHeaderTimeout:            time.Minute,
		MaxHeaderBytes:               1 << 20,
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     log.New(io.Discard, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, oracleConnKey{}, c)
		},
	}
	go func() { _ = srv.Serve(oracleListener{oracleConns}) }()
}

// oracleRecord is the recording handler.
func oracleRecord(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(oracleConnKey{}).(*oracleConn)
	c.mu.Lock()
	c.handled = append(c.handled, oracleRequest{
		Method: r.Method, RequestURI: r.RequestURI, Host: r.Host,
		ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor, Header: r.Header.Clone(),
		ContentLength: r.ContentLength, Chunked: len(r.TransferEncoding) > 0, Close: r.Close,
	})
	c.mu.Unlock()
	w.Header().Set("X-Oracle", "handled")
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}

// oracleVerdict is what the server did with an input: the requests its handler saw, and the
// status of the response it wrote itself after them (0 for none).
type oracleVerdict struct {
	handled []oracleRequest
	refused int
}

// errOracleHung says the server neither answered nor closed the connection in time.
var errOracleHung = errors.New("net/http server did not finish the connection")

// oracleServe feeds in to the server on a fresh connection and waits until it closes it.
func oracleServe(in []byte) (oracleVerdict, error) {
	oracleOnce.Do(startOracle)
	c := &oracleConn{in: bytes.NewReader(in), closed: make(chan struct{})}
	oracleConns <- c
	select {
	case <-c.closed:
	case <-time.After(10 * time.Second):
		return oracleVerdict{}, errOracleHung
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := oracleVerdict{handled: c.handled}
	br := bufio.NewReader(bytes.NewReader(c.out.Bytes()))
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return v, nil
		}
		_ = resp.Body.Close()
		if resp.Header.Get("X-Oracle") == "" {
			v.refused = resp.StatusCode
			return v, nil
		}
	}
}

// readerRequest is one request as http.ReadRequest reads it, with the offset after its body.
type readerRequest struct {
	req *http.Request
	end int
}

// oracleBoundaries reads the requests of in one after the other with http.ReadRequest, each
// body to its end (trailers included), and returns them with their end offsets, stopping at
// the first error.
func oracleBoundaries(in []byte) []readerRequest {
	under := bytes.NewReader(in)
	br := bufio.NewReader(under)
	var out []readerRequest
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return out
		}
		_, err = io.Copy(io.Discard, req.Body)
		if err != nil {
			return out
		}
		out = append(out, readerRequest{req, len(in) - under.Len() - br.Buffered()})
		if req.Close || req.ProtoMinor == 1 && strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
			return out
		}
	}
}

package tlsconfig_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// server accepts loopback connections with one fixed config and reports each handshake result.
type server struct {
	ln      net.Listener
	results chan serverResult
}

type serverResult struct {
	err   error
	state tls.ConnectionState
}

func startServer(t *testing.T, cfg *tls.Config) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s := &server{ln: ln, results: make(chan serverResult, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.results <- serve(conn, cfg)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return s
}

// serve runs the server side of one connection: handshake, then a one-byte greeting so that a
// client whose certificate the server refuses sees the failure.
func serve(conn net.Conn, cfg *tls.Config) serverResult {
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	tconn := tls.Server(conn, cfg)
	if err := tconn.Handshake(); err != nil {
		return serverResult{err: err}
	}
	_, err := tconn.Write([]byte{'k'})
	return serverResult{err: err, state: tconn.ConnectionState()}
}

// dial connects with cfg and returns the server's result and the client's error.
func (s *server) dial(t *testing.T, cfg *tls.Config) (res serverResult, clientErr error) {
	t.Helper()
	conn, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	tconn := tls.Client(conn, cfg)
	clientErr = tconn.Handshake()
	if clientErr == nil {
		_, clientErr = io.ReadFull(tconn, make([]byte, 1))
	}
	if clientErr != nil {
		_ = conn.Close() // unblock a server still waiting for the client
	}
	select {
	case res = <-s.results:
	case <-time.After(10 * time.Second):
		t.Fatal("no server result")
	}
	return res, clientErr
}

// wantRefused fails unless the handshake failed on both ends with target somewhere in the
// chain of the refusing side (nil target: any error).
func wantRefused(t *testing.T, refuser error, other error, target error) {
	t.Helper()
	if refuser == nil || other == nil {
		t.Fatalf("handshake was not refused: refuser error %v, other side %v", refuser, other)
	}
	t.Logf("refused: %v / other side: %v", refuser, other)
	if target != nil && !errors.Is(refuser, target) {
		t.Fatalf("refused with %v, want %v", refuser, target)
	}
}

package service

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
)

// The proxy's tests run on the loopback, which no packet leaves.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend serves on a loopback port: it writes its name, then echoes each line it reads, and
// when the client ends its stream, writes "bye" and closes.
func backend(t *testing.T, name string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = fmt.Fprintln(c, name)
				_, _ = io.Copy(c, c)
				_, _ = fmt.Fprintln(c, "bye")
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// freeAddr is a loopback address and port nothing listens on: on 127.0.0.2 for frontends, so
// that none takes the port of a backend on 127.0.0.1.
func freeAddr(t *testing.T, ip string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddrPort(ln.Addr().String())
	_ = ln.Close()
	return a
}

func newProxy(t *testing.T, idle time.Duration) *Proxy {
	t.Helper()
	p := NewProxy(logr.Discard(), idle, time.Second)
	t.Cleanup(p.Close)
	return p
}

func frontend(a netip.AddrPort, backends ...netip.AddrPort) Frontend {
	return Frontend{Addr: a, Protocol: corev1.ProtocolTCP, Backends: backends}
}

type client struct {
	*net.TCPConn
	r *bufio.Reader
}

func dial(t *testing.T, a netip.AddrPort) (*client, error) {
	t.Helper()
	c, err := (&net.Dialer{Timeout: time.Second}).DialContext(t.Context(), "tcp4", a.String())
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	return &client{TCPConn: c.(*net.TCPConn), r: bufio.NewReader(c)}, nil
}

func (c *client) line(t *testing.T) string {
	t.Helper()
	s, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("read a line through the proxy: %v", err)
	}
	return strings.TrimSuffix(s, "\n")
}

func mustDial(t *testing.T, a netip.AddrPort) *client {
	t.Helper()
	c, err := dial(t, a)
	if err != nil {
		t.Fatalf("connect to the frontend: %v", err)
	}
	return c
}

// Tests that connections go to the backends in turn, that bytes flow both ways, and that a
// client closing its write half gets the rest of the backend's answer (half-close).
func TestProxyForwardsRoundRobinWithHalfClose(t *testing.T) {
	front := freeAddr(t, "127.0.0.2")
	p := newProxy(t, time.Minute)
	if err := p.Set("ns/svc", []Frontend{frontend(front, backend(t, "a"), backend(t, "b"))}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for range 4 {
		c := mustDial(t, front)
		names = append(names, c.line(t))
		_, _ = fmt.Fprintln(c, "ping")
		if got := c.line(t); got != "ping" {
			t.Errorf("echo through the proxy: %q", got)
		}
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if got := c.line(t); got != "bye" {
			t.Errorf("after closing its write half the client read %q, want the backend's last words", got)
		}
		if _, err := c.r.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("after the backend closed, the client reads %v, want EOF", err)
		}
	}
	if strings.Join(names, "") != "abab" && strings.Join(names, "") != "baba" {
		t.Errorf("connections went to %v, want the backends in turn", names)
	}
}

// Tests that a frontend without backends, and one whose Service stopped being served, refuses
// connections, while a connection opened before the change goes on.
func TestProxyRefusesWithoutBackendsAndKeepsOpenConnections(t *testing.T) {
	front := freeAddr(t, "127.0.0.2")
	p := newProxy(t, time.Minute)
	if err := p.Set("ns/svc", []Frontend{frontend(front)}); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, front); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a frontend without backends: %v, want connection refused", err)
	}
	if err := p.Set("ns/svc", []Frontend{frontend(front, backend(t, "a"))}); err != nil {
		t.Fatal(err)
	}
	open := mustDial(t, front)
	if got := open.line(t); got != "a" {
		t.Fatalf("first line %q", got)
	}
	if err := p.Set("ns/svc", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, front); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a frontend no longer served: %v, want connection refused", err)
	}
	_, _ = fmt.Fprintln(open, "still there")
	if got := open.line(t); got != "still there" {
		t.Errorf("the connection opened before the change echoes %q", got)
	}
}

// Tests that the next connections go to the new backends after a change, and that a dead
// backend is skipped for a live one.
func TestProxyFollowsBackendChanges(t *testing.T) {
	front := freeAddr(t, "127.0.0.2")
	p := newProxy(t, time.Minute)
	if err := p.Set("ns/svc", []Frontend{frontend(front, backend(t, "a"))}); err != nil {
		t.Fatal(err)
	}
	if got := mustDial(t, front).line(t); got != "a" {
		t.Fatalf("first backend %q", got)
	}
	if err := p.Set("ns/svc", []Frontend{frontend(front, freeAddr(t, "127.0.0.1"), backend(t, "b"))}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := mustDial(t, front).line(t); got != "b" {
			t.Errorf("after the change a connection reached %q, want b (the other backend is dead)", got)
		}
	}
}

// Tests that a connection no backend accepts is reset at once.
func TestProxyResetsWhenNoBackendAnswers(t *testing.T) {
	front := freeAddr(t, "127.0.0.2")
	p := newProxy(t, time.Minute)
	if err := p.Set("ns/svc", []Frontend{frontend(front, freeAddr(t, "127.0.0.1"))}); err != nil {
		t.Fatal(err)
	}
	c, err := dial(t, front)
	if err == nil { // the reset may come before the dial has seen the connection established
		_, err = c.r.ReadByte()
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a connection to a dead backend: %v, want a reset", err)
	}
}

// Tests that a connection on which nothing moves for the idle timeout is closed, and that one
// busy in one direction only is not.
func TestProxyClosesIdleConnections(t *testing.T) {
	front := freeAddr(t, "127.0.0.2")
	p := newProxy(t, 300*time.Millisecond)
	if err := p.Set("ns/svc", []Frontend{frontend(front, backend(t, "a"))}); err != nil {
		t.Fatal(err)
	}
	busy := mustDial(t, front)
	idle := mustDial(t, front)
	_, _ = busy.line(t), idle.line(t)
	for range 6 { // 600 ms of traffic client -> backend only, read back at the end
		_, _ = fmt.Fprintln(busy, "x")
		time.Sleep(100 * time.Millisecond)
	}
	for range 6 {
		if got := busy.line(t); got != "x" {
			t.Fatalf("the busy connection echoes %q", got)
		}
	}
	start := time.Now()
	if _, err := idle.r.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the idle connection reads %v, want it closed", err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("the idle connection was closed only after %s", waited)
	}
}

// Tests that a frontend served for one Service is not taken by another.
func TestProxyRefusesAFrontendOfAnotherService(t *testing.T) {
	front := freeAddr(t, "127.0.0.2")
	p := newProxy(t, time.Minute)
	if err := p.Set("ns/one", []Frontend{frontend(front, backend(t, "a"))}); err != nil {
		t.Fatal(err)
	}
	if err := p.Set("ns/two", []Frontend{frontend(front, backend(t, "b"))}); err == nil {
		t.Error("a second Service took the first one's frontend")
	}
	if got := mustDial(t, front).line(t); got != "a" {
		t.Errorf("the frontend reaches %q, want the first Service's backend", got)
	}
}

// Tests that Close ends open connections and listeners (goleak checks their goroutines).
func TestProxyCloseEndsConnections(t *testing.T) {
	front := freeAddr(t, "127.0.0.2")
	p := NewProxy(logr.Discard(), time.Minute, time.Second)
	if err := p.Set("ns/svc", []Frontend{frontend(front, backend(t, "a"))}); err != nil {
		t.Fatal(err)
	}
	c := mustDial(t, front)
	_ = c.line(t)
	p.Close()
	if _, err := c.r.ReadByte(); err == nil {
		t.Error("a connection outlived the proxy")
	}
	if _, err := dial(t, front); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after Close: %v, want connection refused", err)
	}
}

package h1server

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
)

// Tests that a read of a request body that the server ends while the read waits for its lock
// reads nothing: the connection's buffered bytes (here the rest of the body) may be back in
// the pool by then, another connection's. A pump still reading after its exchange ended does
// exactly that.
func TestBodyEndedBeforeTheReadsLockReadsNothing(t *testing.T) {
	client, server := net.Pipe()
	defer func() { _ = client.Close(); _ = server.Close() }()
	c := &conn{rw: server, br: bufio.NewReader(strings.NewReader("buffered body bytes"))}
	b := &body{c: c, remain: 19}
	testHookBeforeLock = func() {
		testHookBeforeLock = nil
		b.end() // the handler returned: the server ends the body
	}
	defer func() { testHookBeforeLock = nil }()
	buf := make([]byte, 64)
	n, err := b.Read(buf)
	if n != 0 || !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Fatalf("read after end got %d bytes %q, %v; want none and %v", n, buf[:n], err, http.ErrBodyReadAfterClose)
	}
}

package listener

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"time"
)

// DefaultMaxClientHelloBytes bounds the bytes a TLS passthrough listener reads before it knows
// the server name: a ClientHello with post-quantum key shares and many extensions is about
// 2 KiB, and TLS allows a record of 16 KiB; a client still short of a complete hello after
// that is cut.
const DefaultMaxClientHelloBytes = 16 << 10

var (
	// errHelloTooLarge is a ClientHello still incomplete after the byte bound.
	errHelloTooLarge = errors.New("tls passthrough: ClientHello larger than the bound")
	// errHelloRead ends the handshake of crypto/tls once the hello is parsed.
	errHelloRead = errors.New("tls passthrough: ClientHello read")
)

// readClientHello reads a ClientHello from c, within timeout and max bytes, with crypto/tls's
// own parser (so that what passes is what Go's TLS server accepts: a malformed or non-TLS
// opening fails), and returns its server name (empty when it names none) and every byte read
// from c, which may run past the hello and must reach the backend as they are. Nothing is
// written to c: the handshake is the backend's. The error is os.ErrDeadlineExceeded when the
// hello did not arrive in time, errHelloTooLarge when it did not fit.
func readClientHello(c net.Conn, timeout time.Duration, maxBytes int) (string, []byte, error) {
	rec := &helloRecorder{Conn: c, max: maxBytes}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	var serverName string
	got := false
	srv := tls.Server(rec, &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			serverName, got = hello.ServerName, true
			return nil, errHelloRead
		},
	})
	err := srv.HandshakeContext(context.Background())
	_ = c.SetReadDeadline(time.Time{})
	switch {
	case got:
		return serverName, rec.read, nil
	case rec.tooLarge:
		return "", rec.read, errHelloTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "", rec.read, os.ErrDeadlineExceeded
	case err == nil:
		err = errors.New("tls passthrough: handshake ended without a ClientHello")
	}
	return "", rec.read, err
}

// helloRecorder is the connection crypto/tls reads the hello through: it keeps every byte read,
// refuses to read past max, and drops every write (the alert crypto/tls sends when it gives up
// must not reach the client, whose handshake is the backend's).
type helloRecorder struct {
	net.Conn
	max      int
	read     []byte
	tooLarge bool
}

func (r *helloRecorder) Read(p []byte) (int, error) {
	room := r.max - len(r.read)
	if room <= 0 {
		r.tooLarge = true
		return 0, errHelloTooLarge
	}
	if len(p) > room {
		p = p[:room]
	}
	n, err := r.Conn.Read(p)
	r.read = append(r.read, p[:n]...)
	return n, err
}

func (r *helloRecorder) Write(p []byte) (int, error) { return len(p), nil }

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
	// errBadServerName is a ClientHello whose server name no DNS name could be.
	errBadServerName = errors.New("tls passthrough: server name is not a DNS name")
)

// maxServerName is the length of the longest DNS name, in its dotted text form.
const maxServerName = 253

// readClientHello reads a ClientHello from c, within timeout and max bytes, with crypto/tls's
// own parser (so that what passes is what Go's TLS server accepts: a malformed or non-TLS
// opening fails), and returns its server name (empty when it names none) and every byte read
// from c, which may run past the hello and must reach the backend as they are. Nothing is
// written to c: the handshake is the backend's. The error is os.ErrDeadlineExceeded when the
// hello did not arrive in time, errHelloTooLarge when it did not fit, errBadServerName when its
// server name has a byte no DNS name has (a NUL, a line feed, a space...) or is longer than one:
// such a hello is refused as soon as it is read, never routed to a catch-all backend.
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
	case got && !dnsName(serverName):
		return "", rec.read, errBadServerName
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

// dnsName reports whether name (a ClientHello's server name; empty when it has none) holds
// only the bytes of a DNS host name, letters, digits, hyphens, dots and (as some hosts still
// have) underscores, and fits in one. crypto/tls takes any bytes but a trailing dot.
func dnsName(name string) bool {
	if len(name) > maxServerName {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '.', c == '_':
		default:
			return false
		}
	}
	return true
}

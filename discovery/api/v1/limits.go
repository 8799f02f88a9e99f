package discoveryv1

import "time"

// Limits both ends of the protocol configure their gRPC channels with.
const (
	// MaxBootstrapRequestBytes bounds a BootstrapRequest: a projected token and a CSR of at most
	// pki.MaxCSRBytes fit well inside.
	MaxBootstrapRequestBytes = 64 << 10
	// MaxClientMessageBytes bounds a ClientMessage on the stream.
	MaxClientMessageBytes = 64 << 10
	// MaxServerMessageBytes bounds a ServerMessage, that is one snapshot or delta.
	MaxServerMessageBytes = 64 << 20

	// KeepaliveMinInterval is the shortest client keepalive ping interval the server tolerates;
	// clients pinging more often are disconnected.
	KeepaliveMinInterval = 20 * time.Second
	// KeepaliveInterval is how often either end pings an idle connection.
	KeepaliveInterval = 30 * time.Second
	// KeepaliveTimeout is how long a ping may go unanswered before the connection is closed.
	KeepaliveTimeout = 10 * time.Second
)

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
	// MaxSnapshotBytes bounds the encoding of a full snapshot the controller publishes:
	// MaxServerMessageBytes less room for what a delta adds to the resources it carries (the
	// keys it removes), the nonce and the message's framing. A scope whose snapshot would be
	// larger keeps its last snapshot.
	MaxSnapshotBytes = MaxServerMessageBytes - 1<<20
	// MaxScopeRouteBytes bounds the encoded bytes the routes of one scope's snapshot take
	// together, every copy counted: three quarters of MaxServerMessageBytes, the rest left to
	// its listeners, clusters and certificates.
	MaxScopeRouteBytes = MaxServerMessageBytes / 4 * 3

	// KeepaliveMinInterval is the shortest client keepalive ping interval the server tolerates;
	// clients pinging more often are disconnected.
	KeepaliveMinInterval = 20 * time.Second
	// KeepaliveInterval is how often either end pings an idle connection.
	KeepaliveInterval = 30 * time.Second
	// KeepaliveTimeout is how long a ping may go unanswered before the connection is closed.
	KeepaliveTimeout = 10 * time.Second
)

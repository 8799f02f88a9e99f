package discoveryserver

import (
	"flag"
	"time"

	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/stream"
)

// Limits are the connection and memory limits of the discovery listeners that the operator's
// flags set; a zero field takes the listener's default.
type Limits struct {
	// MaxConnections and MaxConnectionsPerSource cap the stream listener's connections in
	// total and per source address.
	MaxConnections          int
	MaxConnectionsPerSource int
	// BootstrapMaxConnections and BootstrapMaxConnectionsPerSource cap the bootstrap listener's.
	BootstrapMaxConnections          int
	BootstrapMaxConnectionsPerSource int
	// BootstrapReservedConnections are the bootstrap listener's slots beyond its cap for
	// callers whose handshake presented an SVID that verifies against the trust bundle;
	// negative reserves none.
	BootstrapReservedConnections int
	// BusyHandshakeTimeout bounds, on both listeners, the handshake of a connection accepted
	// while more than half the cap is taken.
	BusyHandshakeTimeout time.Duration
	// MaxInFlightBytesPerIdentity caps the bytes of snapshots one identity's streams have sent
	// and not had answered.
	MaxInFlightBytesPerIdentity int
	// MaxInlineBytes bounds the snapshots whose inline layout (routes inside their listeners)
	// the stream listener makes for a proxy that subscribes without route sets.
	MaxInlineBytes int
	// BootstrapMaxRenewalsPerIdentity caps the bootstraps presenting one SPIFFE ID's SVID that
	// run or wait in the renewal lane.
	BootstrapMaxRenewalsPerIdentity int
}

// RegisterLimitFlags registers the flags of the listener limits on fs, with their defaults, and
// returns what they set once fs is parsed.
func RegisterLimitFlags(fs *flag.FlagSet) *Limits {
	l := &Limits{}
	fs.IntVar(&l.MaxConnections, "discovery-max-connections", stream.DefaultMaxConnections,
		"Connections the stream listener holds at once; more are closed at accept.")
	fs.IntVar(&l.MaxConnectionsPerSource, "discovery-max-connections-per-source", stream.DefaultMaxConnectionsPerSource,
		"Stream listener connections one source address may hold; more are closed at accept.")
	fs.IntVar(&l.BootstrapMaxConnections, "discovery-bootstrap-max-connections", bootstrap.DefaultMaxConnections,
		"Connections the bootstrap listener holds at once; more are closed at accept.")
	fs.IntVar(&l.BootstrapMaxConnectionsPerSource, "discovery-bootstrap-max-connections-per-source", bootstrap.DefaultMaxConnectionsPerSource,
		"Bootstrap listener connections one source address may hold; more are closed at accept.")
	fs.IntVar(&l.BootstrapReservedConnections, "discovery-bootstrap-reserved-connections", bootstrap.DefaultReservedConnections,
		"Bootstrap listener connections beyond its maximum kept for callers presenting an SVID that verifies against the trust bundle "+
			"(proxies renewing); a connection without one is closed at the end of its handshake when the maximum of those is open. Negative reserves none.")
	fs.DurationVar(&l.BusyHandshakeTimeout, "discovery-busy-handshake-timeout", stream.DefaultBusyHandshakeTimeout,
		"Handshake deadline of a connection accepted while a discovery listener holds more than half its cap (10s otherwise).")
	fs.IntVar(&l.MaxInFlightBytesPerIdentity, "discovery-max-inflight-bytes-per-identity", stream.DefaultMaxInFlightBytesPerIdentity,
		"Bytes of snapshots the streams of one proxy identity may have sent and not had answered; a push beyond closes its stream.")
	fs.IntVar(&l.MaxInlineBytes, "discovery-max-inline-bytes", cache.DefaultMaxInlineBytes,
		"Largest snapshot, by the size of its full encoding, sent to a proxy that subscribes without route sets; such a stream of a larger scope is closed.")
	fs.IntVar(&l.BootstrapMaxRenewalsPerIdentity, "discovery-bootstrap-max-renewals-per-identity", bootstrap.DefaultMaxRenewalsPerIdentity,
		"Bootstraps presenting the SVID of one proxy identity that may run or wait in the renewal lane; more take the first-bootstrap lane.")
	return l
}

func (l Limits) bootstrapConnections() bootstrap.ConnectionsConfig {
	return bootstrap.ConnectionsConfig{
		MaxConnections: l.BootstrapMaxConnections, MaxConnectionsPerSource: l.BootstrapMaxConnectionsPerSource,
		ReservedConnections: l.BootstrapReservedConnections, BusyHandshakeTimeout: l.BusyHandshakeTimeout,
	}
}

package forward

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// Outcomes of a TLS passthrough connection, as the passthrough metric labels them. The listener
// reports the first three, before a route is looked up.
const (
	PassthroughForwarded          = "forwarded"
	PassthroughHelloTimeout       = "hello_timeout"
	PassthroughHelloTooLarge      = "hello_too_large"
	PassthroughBadHello           = "bad_hello"
	PassthroughNoRoute            = "no_route"
	PassthroughNoBackend          = "no_backend"
	PassthroughBackendUnavailable = "backend_unavailable"
	PassthroughDraining           = "draining"
	// PassthroughHandshakeFailed is a connection of a TLS listener in Terminate mode whose
	// handshake failed (or did not end within the header read timeout).
	PassthroughHandshakeFailed = "handshake_failed"
)

// Terminator completes the TLS handshake of a connection routed to a virtual host that
// terminates TLS, with one of certs, and returns the decrypted connection. hello holds the bytes
// read from down already (its ClientHello, and any bytes after it): the handshake reads them
// first.
type Terminator func(down net.Conn, hello []byte, certs []*router.Certificate) (net.Conn, error)

// PassthroughDialTimeout bounds connecting to one endpoint of a passthrough backend.
const PassthroughDialTimeout = 5 * time.Second

// passthroughDialAttempts is how many endpoints of the chosen backend a connection tries.
const passthroughDialAttempts = 3

// Passthrough forwards a connection of a TLS port, or of a TCP port (serverName empty, hello
// nil): the route its ClientHello's server name selects (on a TCP port, the port's route) picks
// a weighted backend, an endpoint of it is dialed (the next one on failure, up to three), hello
// (every byte read from down so far) is written to it, and the bytes are then copied both ways
// in the background, as a WebSocket tunnel's are: until both sides are done, the tunnel idle
// timeout passes, a table without the route is swapped in, or a drain runs out of time. When
// the route's virtual host terminates TLS (it has certificates, on a TLS port), terminate
// completes the handshake first and the decrypted stream is forwarded instead, over TLS when
// the backend's cluster asks for it (a BackendTLSPolicy). When it cannot forward, it closes
// down. It returns the outcome, and the route's name when a route took the connection.
func (h *Handler) Passthrough(down net.Conn, port uint32, serverName string, hello []byte, terminate Terminator) (route, outcome string) {
	route, outcome = h.passthrough(down, port, serverName, hello, terminate)
	if outcome != PassthroughForwarded {
		_ = down.Close()
	}
	h.opts.Metrics.Passthrough(route, outcome)
	return route, outcome
}

// PassthroughRefused counts a connection of a passthrough port that the listener closed before
// it had a ClientHello to route by (the outcome says why).
func (h *Handler) PassthroughRefused(outcome string) { h.opts.Metrics.Passthrough("", outcome) }

func (h *Handler) passthrough(down net.Conn, port uint32, serverName string, hello []byte, terminate Terminator) (string, string) {
	s := h.state.Load()
	if s == nil {
		return "", PassthroughNoRoute
	}
	p, ok := s.Table.Port(port)
	if !ok || (p.Protocol != router.TLSPassthrough && p.Protocol != router.TLS && p.Protocol != router.TCP) {
		return "", PassthroughNoRoute
	}
	vh, r := p.PassthroughRoute(serverName)
	if r == nil {
		return "", PassthroughNoRoute
	}
	terminates := p.Protocol == router.TLS && len(vh.Certificates) > 0
	b := r.Pick(h.opts.Rand())
	if b == nil || b.Cluster == nil {
		return r.Name, PassthroughNoBackend
	}
	cl := s.Table.Cluster(b.Cluster)
	if cl == nil || len(cl.Endpoints) == 0 || (terminates && cl.TLS != nil && cl.TLS.FailClosed) {
		return r.Name, PassthroughBackendUnavailable
	}
	if terminates {
		if terminate == nil {
			return r.Name, PassthroughHandshakeFailed
		}
		tc, err := terminate(down, hello, vh.Certificates)
		if err != nil {
			return r.Name, PassthroughHandshakeFailed
		}
		down, hello = tc, nil
	}
	up := h.dialEndpoint(cl.Endpoints)
	if up == nil {
		return r.Name, PassthroughBackendUnavailable
	}
	if terminates && cl.TLS != nil {
		// The stream was decrypted for a backend that must be reached over TLS: encrypt it
		// again, verified as the policy says (a passthrough connection is the client's TLS,
		// which the proxy never touches).
		if up = h.backendTLS(up, cl.TLS); up == nil {
			return r.Name, PassthroughBackendUnavailable
		}
	}
	if len(hello) > 0 {
		_ = up.SetWriteDeadline(time.Now().Add(PassthroughDialTimeout))
		if _, err := up.Write(hello); err != nil {
			_ = up.Close()
			return r.Name, PassthroughBackendUnavailable
		}
		_ = up.SetWriteDeadline(time.Time{})
	}
	_ = down.SetDeadline(time.Time{})
	if !h.track() {
		_ = up.Close()
		return r.Name, PassthroughDraining
	}
	t := h.tunnels.add(port, r.Name, down, up)
	if cur := h.state.Load(); cur != s && !hasRoute(cur.Table, port, r.Name) {
		// A Swap that dropped the route between the lookup and add closed the tunnels it
		// knew, not this one: the state it published is current now, so check it here (only
		// when there was a Swap: the route was found in s).
		t.close()
	}
	upstream, downstream := h.opts.Metrics.PassthroughBytes(r.Name)
	upstream.Add(float64(len(hello)))
	go func() {
		defer h.background.Done()
		defer h.tunnels.remove(t)
		h.pipe(t, down, func(up bool, n int) {
			if up {
				upstream.Add(float64(n))
			} else {
				downstream.Add(float64(n))
			}
		})
	}()
	return r.Name, PassthroughForwarded
}

// backendTLS completes a TLS handshake on up as cfg's StreamConfig says, within
// PassthroughDialTimeout, and returns the encrypted connection; nil, with up closed, when the
// handshake failed.
func (h *Handler) backendTLS(up net.Conn, cfg *router.BackendTLS) net.Conn {
	tc := tls.Client(up, cfg.StreamConfig)
	ctx, cancel := context.WithTimeout(h.stopCtx, PassthroughDialTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = up.Close()
		return nil
	}
	return tc
}

// dialEndpoint connects to one of endpoints, starting at a random one and trying the next on
// failure, and returns nil when every attempt failed.
func (h *Handler) dialEndpoint(endpoints []router.Endpoint) net.Conn {
	start := h.opts.Rand()
	d := net.Dialer{Timeout: PassthroughDialTimeout, KeepAlive: 30 * time.Second}
	for i := range min(len(endpoints), passthroughDialAttempts) {
		ep := endpoints[(start+uint64(i))%uint64(len(endpoints))]
		c, err := d.DialContext(h.stopCtx, "tcp", ep.Address)
		if err == nil {
			return c
		}
		if h.stopCtx.Err() != nil {
			return nil
		}
	}
	return nil
}

// Outcomes of a UDP flow, as the flow metric labels them.
const (
	UDPFlowOpened             = "opened"
	UDPFlowRefused            = "flow_limit"
	UDPFlowListenerLimit      = "listener_flow_limit"
	UDPFlowClientLimit        = "client_flow_limit"
	UDPFlowNoRoute            = PassthroughNoRoute
	UDPFlowNoBackend          = PassthroughNoBackend
	UDPFlowBackendUnavailable = PassthroughBackendUnavailable
)

// DialUDP opens the backend socket of a new flow of a UDP port: the port's route (as on a TCP
// port) picks a weighted backend and the socket is connected to a random endpoint of it. It
// returns the route's name when a route took the flow, the socket (nil when it opened none) and
// the outcome.
func (h *Handler) DialUDP(port uint32) (string, *net.UDPConn, string) {
	s := h.state.Load()
	if s == nil {
		return "", nil, UDPFlowNoRoute
	}
	p, ok := s.Table.Port(port)
	if !ok || p.Protocol != router.UDP {
		return "", nil, UDPFlowNoRoute
	}
	_, r := p.PassthroughRoute("")
	if r == nil {
		return "", nil, UDPFlowNoRoute
	}
	b := r.Pick(h.opts.Rand())
	if b == nil || b.Cluster == nil {
		return r.Name, nil, UDPFlowNoBackend
	}
	cl := s.Table.Cluster(b.Cluster)
	if cl == nil || len(cl.Endpoints) == 0 {
		return r.Name, nil, UDPFlowBackendUnavailable
	}
	ep := cl.Endpoints[h.opts.Rand()%uint64(len(cl.Endpoints))]
	c, err := (&net.Dialer{}).DialContext(h.stopCtx, "udp", ep.Address)
	if err != nil {
		return r.Name, nil, UDPFlowBackendUnavailable
	}
	return r.Name, c.(*net.UDPConn), UDPFlowOpened
}

// UDPFlow counts a flow of a UDP port by outcome; route is empty when no route took it.
func (h *Handler) UDPFlow(route, outcome string) { h.opts.Metrics.UDPFlow(route, outcome) }

// PassthroughBytes returns the counters of the bytes a route forwards each way on TLS
// passthrough, TCP and UDP ports: upstream (client to backend) and downstream.
func (h *Handler) PassthroughBytes(route string) (upstream, downstream prometheus.Counter) {
	return h.opts.Metrics.PassthroughBytes(route)
}

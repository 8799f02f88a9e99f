package connlimit

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc/peer"
)

// Reason says why a connection was closed at accept; the listeners use it as a metric label.
type Reason string

// The reasons a connection is refused.
const (
	// ReasonTooManyConnections: the listener holds its maximum.
	ReasonTooManyConnections Reason = "TooManyConnections"
	// ReasonTooManyFromSource: the source address holds its share.
	ReasonTooManyFromSource Reason = "TooManyConnectionsFromSource"
	// ReasonTooManyUnverified: the connection's handshake verified no client certificate and
	// the common slots are taken; the reserved ones are for verified callers.
	ReasonTooManyUnverified Reason = "TooManyUnverifiedConnections"
)

// Config configures a Listener. Max and PerSource are required.
type Config struct {
	// Max caps the connections open at once, but for the Reserved slots.
	Max int
	// Reserved are slots beyond Max for connections whose handshake verified a client
	// certificate (Conn.Settle). Accept takes up to Max+Reserved connections; at the end of its
	// handshake a verified connection moves to a reserved slot while one is free, and any other
	// keeps its slot only while fewer than Max connections have settled into the common slots,
	// and is closed otherwise. Zero reserves nothing: connections that never settle count
	// against Max alone, as do those of a listener whose server never calls Settle.
	Reserved int
	// PerSource caps the connections open at once from one source IP address.
	PerSource int
	// SoftMax is the number of open connections above which a new connection must finish its
	// handshake within BusyHandshakeTimeout; Max/2 when zero.
	SoftMax int
	// BusyHandshakeTimeout bounds the handshake of a connection accepted above SoftMax, in place
	// of the longer deadline the server sets; zero leaves the server's.
	BusyHandshakeTimeout time.Duration
	// IdleTimeout closes a connection that has had no call marked with Conn.Busy for that long;
	// zero never does.
	IdleTimeout time.Duration
	// Refused is called for each connection closed at accept, just before the close and outside
	// any lock; nil ignores them.
	Refused func(reason Reason, source string)
	// Now is the clock, time.Now when nil.
	Now func() time.Time
}

// Listener is a net.Listener that enforces Config on the connections it accepts.
type Listener struct {
	net.Listener
	cfg Config

	mu        sync.Mutex
	perSource map[string]int
	conns     map[connKey]*Conn
	// common and reserved count the connections settled into each kind of slot; the others
	// in conns have not finished their handshake.
	common, reserved int
}

// connKey names a TCP connection of the listener.
type connKey struct{ local, remote string }

// New wraps lis.
func New(lis net.Listener, cfg Config) *Listener {
	if cfg.SoftMax <= 0 {
		cfg.SoftMax = cfg.Max / 2
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Listener{Listener: lis, cfg: cfg, perSource: map[string]int{}, conns: map[connKey]*Conn{}}
}

// Accept returns the next connection within the caps; those beyond are closed and reported.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		source := SourceOf(raw.RemoteAddr())
		c, reason := l.admit(raw, source)
		if c != nil {
			return c, nil
		}
		// Counted before the close, so whoever sees the close sees the count.
		if l.cfg.Refused != nil {
			l.cfg.Refused(reason, source)
		}
		_ = raw.Close()
	}
}

// admit takes a slot for raw, or says why there is none.
func (l *Listener) admit(raw net.Conn, source string) (*Conn, Reason) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case len(l.conns) >= l.cfg.Max+l.cfg.Reserved:
		return nil, ReasonTooManyConnections
	case l.perSource[source] >= l.cfg.PerSource:
		return nil, ReasonTooManyFromSource
	}
	c := &Conn{Conn: raw, l: l, source: source, key: keyOf(raw.LocalAddr(), raw.RemoteAddr()), last: l.cfg.Now()}
	if len(l.conns) >= l.cfg.SoftMax && l.cfg.BusyHandshakeTimeout > 0 {
		c.handshakeBy = c.last.Add(l.cfg.BusyHandshakeTimeout)
	}
	l.conns[c.key] = c
	l.perSource[source]++
	if l.cfg.IdleTimeout > 0 {
		// Under c's lock, which checkIdle takes first: the timer may fire before the assignment.
		c.mu.Lock()
		c.idle = time.AfterFunc(l.cfg.IdleTimeout, c.checkIdle)
		c.mu.Unlock()
	}
	return c, ""
}

// release gives back the slot of c.
func (l *Listener) release(c *Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns[c.key] == c {
		delete(l.conns, c.key)
	}
	switch c.slot {
	case slotCommon:
		l.common--
	case slotReserved:
		l.reserved--
	}
	if l.perSource[c.source] > 1 {
		l.perSource[c.source]--
	} else {
		delete(l.perSource, c.source)
	}
}

// Lookup returns the open connection with these addresses (a gRPC peer's LocalAddr and Addr),
// or nil.
func (l *Listener) Lookup(local, remote net.Addr) *Conn {
	if local == nil || remote == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns[keyOf(local, remote)]
}

// Set holds the listeners one gRPC server is served on, so that a call finds its connection.
// The zero Set is empty and ready.
type Set struct {
	mu        sync.Mutex
	listeners []*Listener
}

// New wraps lis with the limits of cfg, as New does, and adds the result to s.
func (s *Set) New(lis net.Listener, cfg Config) *Listener {
	l := New(lis, cfg)
	s.mu.Lock()
	s.listeners = append(s.listeners, l)
	s.mu.Unlock()
	return l
}

// Open returns how many connections s's listeners hold open, in total and from source.
func (s *Set) Open(source string) (total, fromSource int) {
	s.mu.Lock()
	listeners := s.listeners
	s.mu.Unlock()
	for _, l := range listeners {
		t, f := l.Open(source)
		total, fromSource = total+t, fromSource+f
	}
	return total, fromSource
}

// Settled returns how many connections of s's listeners settled into the common and the
// reserved slots.
func (s *Set) Settled() (common, reserved int) {
	s.mu.Lock()
	listeners := s.listeners
	s.mu.Unlock()
	for _, l := range listeners {
		c, r := l.Settled()
		common, reserved = common+c, reserved+r
	}
	return common, reserved
}

// ConnOf returns the connection that carries the gRPC call of ctx, or nil when none of s's
// listeners holds it (a server served on another listener).
func (s *Set) ConnOf(ctx context.Context) *Conn {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	s.mu.Lock()
	listeners := s.listeners
	s.mu.Unlock()
	for _, l := range listeners {
		if c := l.Lookup(p.LocalAddr, p.Addr); c != nil {
			return c
		}
	}
	return nil
}

// Open returns how many connections are open, in total and from source.
func (l *Listener) Open(source string) (total, fromSource int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns), l.perSource[source]
}

// Settled returns how many open connections settled into the common and the reserved slots.
func (l *Listener) Settled() (common, reserved int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.common, l.reserved
}

// settle moves c to a reserved slot when verified and one is free, else to a common slot
// while fewer than Max connections hold one; false means neither.
func (l *Listener) settle(c *Conn, verified bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.conns[c.key] != c, c.slot != slotPending: // closed meanwhile, or settled already
		return true
	case verified && l.reserved < l.cfg.Reserved:
		c.slot = slotReserved
		l.reserved++
	case l.common < l.cfg.Max:
		c.slot = slotCommon
		l.common++
	default:
		return false
	}
	return true
}

func keyOf(local, remote net.Addr) connKey {
	return connKey{local: local.String(), remote: remote.String()}
}

// SourceOf returns the IP address of addr, the unit of the per-source cap; addr's string when it
// has no IP.
func SourceOf(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.AddrPort().Addr().Unmap().String()
	}
	if ap, err := netip.ParseAddrPort(addr.String()); err == nil {
		return ap.Addr().Unmap().String()
	}
	return addr.String()
}

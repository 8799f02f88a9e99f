package service

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// udpIdle ends a UDP session after this long without a datagram either way, as conntrack
// forgets an unanswered UDP flow.
const udpIdle = 30 * time.Second

// udpListener is a UDP frontend: the socket clients send to, and a session per client.
type udpListener struct {
	rotation
	key  string
	conn *net.UDPConn

	mu       sync.Mutex
	closed   bool
	sessions map[netip.AddrPort]*udpSession
}

// udpSession is one client's flow: a socket connected to the backend chosen for it.
type udpSession struct {
	backend netip.AddrPort
	up      *net.UDPConn
	last    atomic.Int64
}

func (u *udpListener) owner() string { return u.key }

// setBackends takes new backends for new clients and ends the sessions of backends that left.
func (u *udpListener) setBackends(backends []netip.AddrPort) {
	u.backends.Store(&backends)
	u.mu.Lock()
	defer u.mu.Unlock()
	for client, s := range u.sessions {
		if !slices.Contains(backends, s.backend) {
			delete(u.sessions, client)
			_ = s.up.Close() // its relay ends
		}
	}
}

func (u *udpListener) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	_ = u.conn.Close()
	for _, s := range u.sessions {
		_ = s.up.Close()
	}
}

func (p *Proxy) serveUDP(u *udpListener) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, client, err := u.conn.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue // an ICMP error of an earlier answer, say
		}
		s, err := p.session(u, client)
		if err != nil {
			p.log.V(1).Info("Dropped datagram", "frontend", u.conn.LocalAddr().String(), "reason", err.Error())
			continue
		}
		s.last.Store(time.Now().UnixNano())
		_, _ = s.up.Write(buf[:n]) // datagrams may be lost
	}
}

// session is the client's session, started with the next backend if it has none.
func (p *Proxy) session(u *udpListener, client netip.AddrPort) (*udpSession, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s, ok := u.sessions[client]; ok {
		return s, nil
	}
	if u.closed {
		return nil, net.ErrClosed
	}
	backend := u.turn()[0]
	up, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(backend))
	if err != nil {
		return nil, err
	}
	s := &udpSession{backend: backend, up: up}
	s.last.Store(time.Now().UnixNano())
	u.sessions[client] = s
	p.wg.Add(1)
	go p.relay(u, client, s)
	return s, nil
}

// relay sends the backend's answers to the client until the session idles or is closed.
func (p *Proxy) relay(u *udpListener, client netip.AddrPort, s *udpSession) {
	defer p.wg.Done()
	defer func() {
		u.mu.Lock()
		if u.sessions[client] == s {
			delete(u.sessions, client)
		}
		u.mu.Unlock()
		_ = s.up.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		_ = s.up.SetReadDeadline(time.Unix(0, s.last.Load()).Add(udpIdle))
		n, err := s.up.Read(buf)
		var ne net.Error
		switch {
		case err == nil:
			s.last.Store(time.Now().UnixNano())
			_, _ = u.conn.WriteToUDPAddrPort(buf[:n], client)
		case errors.As(err, &ne) && ne.Timeout():
			if time.Since(time.Unix(0, s.last.Load())) >= udpIdle {
				return
			}
		case errors.Is(err, net.ErrClosed):
			return
		default: // the backend refused a datagram (ICMP): later ones may pass
		}
	}
}

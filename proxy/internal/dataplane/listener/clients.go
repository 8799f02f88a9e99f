package listener

import (
	"net"
	"net/netip"
	"sync"
)

// clientConns counts the open downstream connections of each client address over every port
// of a manager, so that one client cannot take the whole connection limit: a connection
// beyond its address's share is closed on accept, as one beyond the limit is.
type clientConns struct {
	max  int
	mu   sync.Mutex
	open map[netip.Addr]int
}

func newClientConns(max int) *clientConns {
	return &clientConns{max: max, open: map[netip.Addr]int{}}
}

// take counts a connection of addr and reports whether addr stays within its share. A
// connection whose address is not an IP address (a test's pipe) is not counted.
func (c *clientConns) take(addr netip.Addr) bool {
	if !addr.IsValid() {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[addr] >= c.max {
		return false
	}
	c.open[addr]++
	return true
}

// give returns a place that take counted.
func (c *clientConns) give(addr netip.Addr) {
	if !addr.IsValid() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[addr] <= 1 {
		delete(c.open, addr)
		return
	}
	c.open[addr]--
}

// clientAddr is the IP address of a connection's peer, IPv4-mapped IPv6 addresses unmapped so
// that both forms of one client share one count; the zero Addr when the peer is not TCP.
func clientAddr(c net.Conn) netip.Addr {
	tcp, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	return tcp.AddrPort().Addr().Unmap()
}

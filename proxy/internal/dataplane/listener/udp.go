package listener

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// Defaults of the UDP flow limits, which the proxy's flags show.
const (
	// DefaultUDPIdleTimeout ends a flow that carried nothing either way this long.
	DefaultUDPIdleTimeout = 60 * time.Second
	// DefaultMaxUDPFlows bounds the flows of the proxy, all UDP ports together: each holds a
	// socket to its backend and a goroutine, about 4 KiB of memory while idle (no buffer: see
	// readDatagram), so that the flows of a full table fit in 64 MiB.
	DefaultMaxUDPFlows = 16384
	// DefaultMaxUDPFlowsPerListener is a quarter of the flow limit: a flood on one port (one
	// Gateway's listener, on the shared pool) leaves flows for the others.
	DefaultMaxUDPFlowsPerListener = DefaultMaxUDPFlows / 4
	// DefaultMaxUDPFlowsPerClient is a quarter of a listener's share: a client address sending
	// from many ports cannot take more, and four such clients are needed to fill a listener.
	DefaultMaxUDPFlowsPerClient = DefaultMaxUDPFlowsPerListener / 4
)

// maxDatagram is the largest UDP payload.
const maxDatagram = 64 << 10

// datagrams are the buffers datagrams are read into: a flow takes one once its backend's
// datagram has arrived and gives it back once it is written to the client, so that an idle
// flow holds none.
var datagrams = sync.Pool{New: func() any { return new([maxDatagram]byte) }}

// udpServer serves one UDP port: each client address gets a flow, a socket connected to an
// endpoint of the backend its first datagram was routed to, which carries that client's
// datagrams there and the answers back, until it is idle for the idle timeout or its route
// leaves the table.
type udpServer struct {
	m    *Manager
	port uint32
	conn *net.UDPConn

	mu    sync.Mutex
	flows map[netip.AddrPort]*udpFlow
	// open counts the flows of the port against MaxUDPFlowsPerListener: flows, and the flows
	// being opened.
	open  int
	table *router.Table
	done  bool
	wg    sync.WaitGroup
}

// udpFlow is one client address's flow.
type udpFlow struct {
	s      *udpServer
	client netip.AddrPort
	route  string
	up     *net.UDPConn
	idle   *time.Timer
	// bytes count the bytes to the backend and back.
	bytes [2]prometheus.Counter
	once  sync.Once
}

func (m *Manager) newUDP(port uint32, addr string) (*udpServer, error) {
	pc, err := (&net.ListenConfig{}).ListenPacket(context.Background(), "udp", addr)
	if err != nil {
		return nil, err
	}
	return &udpServer{m: m, port: port, conn: pc.(*net.UDPConn), flows: map[netip.AddrPort]*udpFlow{}}, nil
}

// serve reads datagrams until the socket closes, one at a time, into one buffer of the pool.
func (s *udpServer) serve() error {
	b := datagrams.Get().(*[maxDatagram]byte)
	defer datagrams.Put(b)
	buf := b[:]
	for {
		n, client, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		s.datagram(client, buf[:n])
	}
}

// datagram forwards one datagram of client, opening its flow first when it has none.
func (s *udpServer) datagram(client netip.AddrPort, payload []byte) {
	f := s.flow(client)
	if f == nil {
		return
	}
	f.idle.Reset(s.m.opts.UDPIdleTimeout)
	if _, err := f.up.Write(payload); err == nil {
		f.bytes[0].Add(float64(len(payload)))
	}
}

// flow returns client's flow, opening it when it has none and a route takes it; nil when the
// datagram is to be dropped.
func (s *udpServer) flow(client netip.AddrPort) *udpFlow {
	state := s.m.handler.Current()
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return nil
	}
	if state != nil && state.Table != s.table {
		s.table = state.Table
		s.sweep(state.Table)
	}
	if f, ok := s.flows[client]; ok {
		s.mu.Unlock()
		return f
	}
	refusal := s.admit(client)
	s.mu.Unlock()
	if refusal != "" {
		if refusal != udpOverloaded {
			s.m.handler.UDPFlow("", refusal)
		}
		return nil
	}
	route, up, outcome := s.m.handler.DialUDP(s.port)
	s.m.handler.UDPFlow(route, outcome)
	if up == nil {
		s.release(client)
		return nil
	}
	f := &udpFlow{s: s, client: client, route: route, up: up}
	f.bytes[0], f.bytes[1] = s.m.handler.PassthroughBytes(route)
	f.idle = time.AfterFunc(s.m.opts.UDPIdleTimeout, f.close)
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		f.close()
		return nil
	}
	s.flows[client] = f
	s.wg.Add(1)
	s.mu.Unlock()
	go f.answers()
	return f
}

// admit counts a new flow of client against the flow limits of the proxy, of the port and of
// client's address, unless the overload manager refuses it first (and counts it), and returns
// why it is refused ("" when it is not): a refused flow takes no place. The caller holds s.mu.
func (s *udpServer) admit(client netip.AddrPort) string {
	o := &s.m.opts
	switch {
	case o.Overload.Overloaded():
		o.Overload.refusedUDPFlow()
		return udpOverloaded
	case s.open >= o.MaxUDPFlowsPerListener:
		return forward.UDPFlowListenerLimit
	}
	if s.m.udpFlows.Add(1) > int64(o.MaxUDPFlows) {
		s.m.udpFlows.Add(-1)
		return forward.UDPFlowRefused
	}
	if !s.m.udpClients.take(client.Addr().Unmap()) {
		s.m.udpFlows.Add(-1)
		return forward.UDPFlowClientLimit
	}
	s.open++
	return ""
}

// udpOverloaded is admit's refusal while the proxy is overloaded, counted by the overload
// manager rather than as a flow.
const udpOverloaded = "overloaded"

// release gives back the places admit counted for a flow of client. The caller does not hold
// s.mu.
func (s *udpServer) release(client netip.AddrPort) {
	s.mu.Lock()
	s.open--
	s.mu.Unlock()
	s.m.udpClients.give(client.Addr().Unmap())
	s.m.udpFlows.Add(-1)
}

// sweep closes the flows whose route table no longer has on the port. The caller holds s.mu.
func (s *udpServer) sweep(table *router.Table) {
	if len(s.flows) == 0 {
		return
	}
	live := map[string]bool{}
	if p, ok := table.Port(s.port); ok {
		for _, vh := range p.VirtualHosts() {
			for _, r := range vh.Routes() {
				live[r.Name] = true
			}
		}
	}
	for client, f := range s.flows {
		if !live[f.route] {
			// Out of the map at once, so that this datagram opens a flow on the new route.
			delete(s.flows, client)
			go f.close()
		}
	}
}

// answers copies the backend's datagrams back to the client until the flow closes. An ICMP
// unreachable from the backend (ECONNREFUSED on the connected socket) does not end the flow:
// the client's next datagram tries again, and the idle timeout ends it.
func (f *udpFlow) answers() {
	defer f.s.wg.Done()
	defer f.close()
	rc, err := f.up.SyscallConn()
	if err != nil {
		return
	}
	for {
		b, n, err := readDatagram(rc)
		if errors.Is(err, syscall.ECONNREFUSED) {
			continue
		}
		if err != nil {
			return
		}
		f.idle.Reset(f.s.m.opts.UDPIdleTimeout)
		if _, err := f.s.conn.WriteToUDPAddrPort(b[:n], f.client); err == nil {
			f.bytes[1].Add(float64(n))
		}
		datagrams.Put(b)
	}
}

// readDatagram waits for a datagram on rc and reads it into a buffer of the pool, which the
// caller gives back. It takes the buffer only once the runtime's poller says the socket is
// readable, and gives it back when that was early: a flow waiting for its backend holds no
// buffer, on its stack or the heap, only its goroutine's small stack. (A blocking Read would
// hold its buffer for as long as it waits.) The buffer is nil when err is not nil.
func readDatagram(rc syscall.RawConn) (*[maxDatagram]byte, int, error) {
	var (
		b    *[maxDatagram]byte
		n    int
		rerr error
	)
	err := rc.Read(func(fd uintptr) bool {
		b = datagrams.Get().(*[maxDatagram]byte)
		for {
			n, rerr = syscall.Read(int(fd), b[:])
			if !errors.Is(rerr, syscall.EINTR) {
				break
			}
		}
		if errors.Is(rerr, syscall.EAGAIN) {
			datagrams.Put(b)
			b = nil
			return false
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		if b != nil {
			datagrams.Put(b)
		}
		return nil, 0, err
	}
	return b, n, nil
}

// close ends the flow and gives its place back.
func (f *udpFlow) close() {
	f.once.Do(func() {
		f.idle.Stop()
		_ = f.up.Close()
		s := f.s
		s.mu.Lock()
		if s.flows[f.client] == f {
			delete(s.flows, f.client)
		}
		s.mu.Unlock()
		s.release(f.client)
	})
}

// shutdown closes the socket and every flow: a datagram protocol has nothing to drain.
func (s *udpServer) shutdown(context.Context) error {
	err := s.conn.Close()
	s.mu.Lock()
	s.done = true
	flows := make([]*udpFlow, 0, len(s.flows))
	for _, f := range s.flows {
		flows = append(flows, f)
	}
	s.mu.Unlock()
	for _, f := range flows {
		f.close()
	}
	s.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

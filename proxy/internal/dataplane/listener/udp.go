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
	// socket to its backend and a goroutine.
	DefaultMaxUDPFlows = 16384
)

// maxDatagram is the largest UDP payload.
const maxDatagram = 64 << 10

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

// serve reads datagrams until the socket closes.
func (s *udpServer) serve() error {
	buf := make([]byte, maxDatagram)
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
	s.mu.Unlock()
	if s.m.udpFlows.Add(1) > int64(s.m.opts.MaxUDPFlows) {
		s.m.udpFlows.Add(-1)
		s.m.handler.UDPFlow("", forward.UDPFlowRefused)
		return nil
	}
	route, up, outcome := s.m.handler.DialUDP(s.port)
	s.m.handler.UDPFlow(route, outcome)
	if up == nil {
		s.m.udpFlows.Add(-1)
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
	buf := make([]byte, maxDatagram)
	for {
		n, err := f.up.Read(buf)
		if errors.Is(err, syscall.ECONNREFUSED) {
			continue
		}
		if err != nil {
			f.close()
			return
		}
		f.idle.Reset(f.s.m.opts.UDPIdleTimeout)
		if _, err := f.s.conn.WriteToUDPAddrPort(buf[:n], f.client); err == nil {
			f.bytes[1].Add(float64(n))
		}
	}
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
		s.m.udpFlows.Add(-1)
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

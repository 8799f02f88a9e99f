package forward

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// tunnel takes over the client connection once the backend accepted a WebSocket upgrade with
// a 101 that switches to websocket (any other 101 is a 502): the 101 goes to the client, and from then on bytes flow both ways untouched until either
// side closes, neither sends anything for TunnelIdleTimeout, the tunnel's route or port leaves
// the routing table, or the data plane shuts down. The status recorded is 101.
func (h *Handler) tunnel(x *exchange, b *router.Backend, resp *http.Response) int {
	up, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		return x.refuse(http.StatusBadGateway, reasonUpstreamError)
	}
	if !upgradesToWebSocket(resp) {
		// A backend that switches to another protocol than the one asked for would get a
		// tunnel the client never agreed to.
		_ = up.Close()
		return x.refuse(http.StatusBadGateway, reasonUpstreamError)
	}
	if !h.track() {
		_ = up.Close()
		return x.refuse(http.StatusServiceUnavailable, reasonShuttingDown)
	}
	down, rw, err := x.rc.Hijack()
	if err != nil {
		h.background.Done()
		_ = up.Close()
		return x.refuse(http.StatusBadGateway, reasonUpstreamError)
	}
	x.wrote = true
	hdr := make(http.Header, len(resp.Header))
	copyEndToEnd(hdr, resp.Header)
	for _, m := range x.route.ResponseHeaders {
		modifyHeaders(hdr, m)
	}
	if b.Filters != nil {
		for _, m := range b.Filters.ResponseHeaders {
			modifyHeaders(hdr, m)
		}
	}
	hdr[headerConnection] = []string{"Upgrade"}
	hdr[headerUpgrade] = []string{"websocket"}
	_ = down.SetDeadline(time.Now().Add(h.opts.SendTimeout))
	_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	_ = hdr.Write(rw)
	_, _ = rw.WriteString("\r\n")
	if err := rw.Flush(); err != nil {
		h.background.Done()
		_ = down.Close()
		_ = up.Close()
		return http.StatusSwitchingProtocols
	}
	_ = down.SetDeadline(time.Time{})
	t := h.tunnels.add(x.listener.Port, x.route.Name, down, up)
	if s := h.state.Load(); s == nil || !hasRoute(s.Table, t.port, t.route) {
		// A Swap that dropped the route between the lookup and add closed the tunnels it
		// knew, not this one: the state it published is current now, so check it here.
		t.close()
	}
	go func() {
		defer h.background.Done()
		defer h.tunnels.remove(t)
		// Bytes the client sent after its upgrade request are in the server's reader.
		h.pipe(t, rw.Reader, nil)
	}()
	return http.StatusSwitchingProtocols
}

// pipe copies both ways until both directions end or the tunnel goes idle, reading the client
// through down (which may hold bytes the client sent already). count, when set, is told of
// every chunk copied, upstream (client to backend) or not.
func (h *Handler) pipe(t *tunnel, down io.Reader, count func(upstream bool, n int)) {
	idle := time.AfterFunc(h.opts.TunnelIdleTimeout, t.close)
	defer idle.Stop()
	active := func(upstream bool, n int) {
		idle.Reset(h.opts.TunnelIdleTimeout)
		if count != nil {
			count(upstream, n)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = copyActive(t.up, down, func(n int) { active(true, n) })
		closeWrite(t.up)
	}()
	_ = copyActive(t.down, t.up, func(n int) { active(false, n) })
	closeWrite(t.down)
	<-done
}

// copyActive copies src to dst, calling active with the size of every chunk.
func copyActive(dst io.Writer, src io.Reader, active func(n int)) error {
	buf := make([]byte, 16<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			active(n)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
}

// closeWrite half-closes c when it can, else closes it, so the other direction can finish.
func closeWrite(c io.Closer) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// tunnel is one open WebSocket tunnel.
type tunnel struct {
	port  uint32
	route string
	down  net.Conn
	up    io.ReadWriteCloser
	once  sync.Once
}

func (t *tunnel) close() {
	t.once.Do(func() {
		_ = t.down.Close()
		_ = t.up.Close()
	})
}

// tunnels tracks the open tunnels so that a drain that runs out of time, or a table without
// their route, can close them.
type tunnels struct {
	mu    sync.Mutex
	conns map[*tunnel]struct{}
}

func newTunnels() tunnels { return tunnels{conns: map[*tunnel]struct{}{}} }

func (ts *tunnels) add(port uint32, route string, down net.Conn, up io.ReadWriteCloser) *tunnel {
	t := &tunnel{port: port, route: route, down: down, up: up}
	ts.mu.Lock()
	ts.conns[t] = struct{}{}
	ts.mu.Unlock()
	return t
}

func (ts *tunnels) remove(t *tunnel) {
	ts.mu.Lock()
	delete(ts.conns, t)
	ts.mu.Unlock()
	t.close()
}

func (ts *tunnels) closeAll() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for t := range ts.conns {
		t.close()
	}
}

// hasRoute says whether table has the route named route on port.
func hasRoute(table *router.Table, port uint32, route string) bool {
	p, ok := table.Port(port)
	if !ok {
		return false
	}
	for _, vh := range p.VirtualHosts() {
		for _, r := range vh.Routes() {
			if r.Name == route {
				return true
			}
		}
	}
	return false
}

// closeGone closes the tunnels whose port, or whose route on that port, table does not have.
func (ts *tunnels) closeGone(table *router.Table) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.conns) == 0 {
		return
	}
	type key struct {
		port  uint32
		route string
	}
	live := map[key]bool{}
	for _, p := range table.Ports() {
		for _, vh := range p.VirtualHosts() {
			for _, r := range vh.Routes() {
				live[key{p.Number, r.Name}] = true
			}
		}
	}
	for t := range ts.conns {
		if !live[key{t.port, t.route}] {
			t.close()
		}
	}
}

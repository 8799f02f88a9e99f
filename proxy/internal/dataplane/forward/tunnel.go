package forward

import (
	"context"
	"io"
	"net"
	"sync"

	"github.com/valyala/fasthttp"

	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

// badGateway is written on a hijacked connection whose upstream could not be reached.
const badGateway = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

// tunnel takes over the client connection for a WebSocket upgrade: the request head goes to
// the endpoint on a new connection, and from then on bytes flow both ways untouched, the
// endpoint's 101 answer included. The status recorded is 101.
func (h *Handler) tunnel(x *exchange, ep *upstream.Endpoint) int {
	req := &x.ctx.Request
	req.Header.SetRequestURIBytes(req.URI().RequestURI())
	head := append([]byte(nil), req.Header.Header()...)
	addr := ep.Address
	h.background.Add(1)
	x.ctx.HijackSetNoResponse(true)
	x.ctx.Hijack(func(down net.Conn) {
		defer h.background.Done()
		h.pipe(down, addr, head)
	})
	return fasthttp.StatusSwitchingProtocols
}

func (h *Handler) pipe(down net.Conn, addr string, head []byte) {
	dialer := net.Dialer{Timeout: h.opts.DialTimeout}
	up, err := dialer.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		_, _ = io.WriteString(down, badGateway)
		return
	}
	id := h.tunnels.add(down, up)
	defer h.tunnels.remove(id)
	if _, err := up.Write(head); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, down)
		closeWrite(up)
		close(done)
	}()
	_, _ = io.Copy(down, up)
	closeWrite(down)
	<-done
}

// closeWrite half-closes c when it can, else closes it, so the other direction can finish.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// tunnels tracks the open tunnels so a drain that runs out of time can close them.
type tunnels struct {
	mu    sync.Mutex
	next  uint64
	conns map[uint64][2]net.Conn
}

func newTunnels() tunnels { return tunnels{conns: map[uint64][2]net.Conn{}} }

func (t *tunnels) add(down, up net.Conn) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	t.conns[t.next] = [2]net.Conn{down, up}
	return t.next
}

func (t *tunnels) remove(id uint64) {
	t.mu.Lock()
	c := t.conns[id]
	delete(t.conns, id)
	t.mu.Unlock()
	_ = c[0].Close()
	_ = c[1].Close()
}

func (t *tunnels) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.conns {
		_ = c[0].Close()
		_ = c[1].Close()
	}
}

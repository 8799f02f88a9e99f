package listener

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/valyala/fasthttp"

	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// server serves one bound port.
type server struct {
	port     uint32
	protocol router.Protocol
	addr     net.Addr
	fast     *fasthttp.Server
	h2       *h2Server
	reaper   *reaper
	ln       net.Listener
	served   chan error
}

func (m *Manager) newServer(port uint32, protocol router.Protocol) (*server, error) {
	addr := m.opts.Address(port)
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bind port %d on %s: %w", port, addr, err)
	}
	s := &server{port: port, protocol: protocol, addr: ln.Addr(), ln: ln, served: make(chan error, 1)}
	s.reaper = newReaper(m.opts.ReadTimeout, m.opts.IdleTimeout)
	ln = trackedListener{Listener: ln, r: s.reaper}
	l := &forward.Listener{Port: port, Scheme: "http"}
	if protocol == router.HTTPS {
		l.Scheme = "https"
	}
	s.fast = m.fastServer(l)
	if protocol == router.HTTPS {
		s.h2 = newH2Server(m.handler.HTTP(l), ln.Addr(), &m.opts)
		s.fast.NextProto("h2", s.h2.serve)
		ln = tls.NewListener(ln, tlsConfig(m.handler, port))
	}
	go func() { s.served <- s.fast.Serve(ln) }()
	return s, nil
}

func (m *Manager) fastServer(l *forward.Listener) *fasthttp.Server {
	h := m.handler
	return &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			tc := tracked(ctx.Conn())
			if tc == nil {
				h.Serve(ctx, l)
				return
			}
			tc.begin()
			h.ServeFrom(ctx, l, tc.clientIP)
			if !ctx.Hijacked() {
				tc.end() // a tunnel stays in flight: its own ends decide when it closes
			}
		},
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		// The read and idle timeouts are the reaper's: fasthttp's would arm timers per request.
		MaxRequestBodySize: m.opts.MaxRequestBodySize,
		ReadBufferSize:     m.opts.ReadBufferSize,
		WriteBufferSize:    m.opts.WriteBufferSize,
		CloseOnShutdown:    true,
		TCPKeepalive:       true,
		Logger:             discard{},
	}
}

// shutdown stops accepting, tells HTTP/2 clients to go away, closes idle keep-alive
// connections and waits for requests in flight until ctx ends.
func (s *server) shutdown(ctx context.Context) error {
	var errs []error
	// fasthttp only closes the listeners its Serve has registered, which a server shut down
	// right after it started may not have done yet.
	if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		errs = append(errs, err)
	}
	var wg sync.WaitGroup
	var h2err error
	if s.h2 != nil {
		wg.Go(func() { h2err = s.h2.srv.Shutdown(ctx) })
	}
	if err := s.fast.ShutdownWithContext(ctx); !errors.Is(err, net.ErrClosed) {
		errs = append(errs, err)
	}
	wg.Wait()
	s.reaper.close()
	errs = append(errs, h2err)
	select {
	case err := <-s.served:
		errs = append(errs, err)
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shut down port %d: %w", s.port, err)
	}
	return nil
}

// discard drops fasthttp's own log lines; errors that matter reach metrics and the access log.
type discard struct{}

func (discard) Printf(string, ...any) {}

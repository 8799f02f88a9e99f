package discoveryserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"

	"coxswain.dev/coxswain/discovery/server"
	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/internal/identity/servingcert"
)

// generation is one set of running listeners with their serving certificate.
type generation struct {
	cfg    listenConfig
	addrs  Addrs
	grace  time.Duration
	cancel context.CancelFunc
	wg     sync.WaitGroup
	failed chan struct{}
	fail   sync.Once

	servers []*grpc.Server
	stream  *stream.Server
}

// start binds the listeners of cfg and serves them until stop. Either both listeners run or
// neither does.
func (r *Runner) start(ctx context.Context, cfg listenConfig) (*generation, error) {
	td, err := spiffe.ParseTrustDomain(cfg.trustDomain)
	if err != nil {
		return nil, err
	}
	certs, err := r.servingCert(td)
	if err != nil {
		return nil, err
	}
	g := &generation{cfg: cfg, grace: r.opts.ShutdownGrace, failed: make(chan struct{})}
	gctx, cancel := context.WithCancel(ctx)
	g.cancel = cancel
	if err := r.listen(gctx, g, td, certs); err != nil {
		g.stop()
		return nil, err
	}
	g.wg.Go(func() { _ = certs.Start(gctx) })
	r.log.Info("Serving discovery", "bootstrap", g.addrs.Bootstrap, "stream", g.addrs.Stream, "trustDomain", td.Name())
	return g, nil
}

func (r *Runner) servingCert(td spiffeid.TrustDomain) (*servingcert.Manager, error) {
	certs, err := servingcert.New(servingcert.Options{
		CA: r.opts.CA, TrustDomain: td, Namespace: r.opts.Namespace, ServiceAccount: r.opts.ServiceAccount,
		TTL: r.opts.ServingTTL, Logger: r.log.WithName("servingcert"),
	})
	if err != nil {
		return nil, err
	}
	if err := certs.Refresh(); err != nil {
		return nil, err
	}
	return certs, nil
}

// listen builds and serves the bootstrap server and, when configured, the stream server.
func (r *Runner) listen(ctx context.Context, g *generation, td spiffeid.TrustDomain, certs tlsconfig.CertificateSource) error {
	bs, conns, err := r.bootstrapServer(td, g.cfg, certs)
	if err != nil {
		return err
	}
	if g.addrs.Bootstrap, err = g.serve(ctx, bs, r.address(g.cfg.bootstrapPort), conns.Listener); err != nil {
		return fmt.Errorf("bootstrap listener: %w", err)
	}
	if r.opts.Snapshots == nil {
		return nil
	}
	ss, srv, err := r.streamServer(td, g.cfg, certs)
	if err != nil {
		return err
	}
	g.stream = srv
	if g.addrs.Stream, err = g.serve(ctx, ss, r.address(g.cfg.streamPort), srv.Listener); err != nil {
		return fmt.Errorf("stream listener: %w", err)
	}
	return nil
}

// bootstrapServer builds the bootstrap server and the connection limits to serve it behind.
func (r *Runner) bootstrapServer(td spiffeid.TrustDomain, cfg listenConfig, certs tlsconfig.CertificateSource) (*grpc.Server, *bootstrap.Connections, error) {
	cc := r.opts.Limits.bootstrapConnections()
	cc.Registerer, cc.Logger = r.opts.Registerer, r.log.WithName("bootstrap")
	conns, err := bootstrap.NewConnections(cc)
	if err != nil {
		return nil, nil, err
	}
	svc, err := bootstrap.New(bootstrap.Config{
		TrustDomain: td, Authenticator: r.opts.Authenticator, Allowlist: r.opts.Allowlist, CA: r.opts.CA,
		Reporter: r.opts.Reporter, Registerer: r.opts.Registerer, Logger: r.log.WithName("bootstrap"),
		SVIDTTL: cfg.svidTTL, MaxRenewalsPerIdentity: r.opts.Limits.BootstrapMaxRenewalsPerIdentity,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("bootstrap service: %w", err)
	}
	gs, err := svc.NewGRPCServer(tlsconfig.BootstrapServer(certs), conns.ServerOptions()...)
	if err != nil {
		return nil, nil, err
	}
	return gs, conns, nil
}

// streamServer serves the stream on mandatory mTLS: the handshake admits any SVID of the trust
// domain that chains to the current bundle, and the stream service authorizes each scope.
func (r *Runner) streamServer(td spiffeid.TrustDomain, cfg listenConfig, certs tlsconfig.CertificateSource) (*grpc.Server, *stream.Server, error) {
	srv, err := stream.New(stream.Config{
		TrustDomain: td, Bundles: r.opts.CA, Cache: r.opts.Snapshots, Scopes: r.opts.Scopes,
		MaxStreamsPerIdentity: int(cfg.maxStreams), MaxSessionLifetime: cfg.svidTTL,
		MaxConnections: r.opts.Limits.MaxConnections, MaxConnectionsPerSource: r.opts.Limits.MaxConnectionsPerSource,
		BusyHandshakeTimeout: r.opts.Limits.BusyHandshakeTimeout, MaxInFlightBytesPerIdentity: r.opts.Limits.MaxInFlightBytesPerIdentity,
		MaxInlineBytes:   r.opts.Limits.MaxInlineBytes,
		InstallNamespace: r.opts.Namespace, Registerer: r.opts.Registerer, Logger: r.log.WithName("stream"),
		OnAnswer: r.opts.OnAnswer, OnConverged: r.opts.OnConverged,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("stream service: %w", err)
	}
	gs, err := srv.NewGRPCServer(tlsconfig.MTLSServer(certs, r.opts.CA, td, tlsconfig.AuthorizeAny()))
	if err != nil {
		return nil, nil, err
	}
	return gs, srv, nil
}

func (r *Runner) address(port int32) string {
	return net.JoinHostPort(r.opts.Host, strconv.Itoa(int(port)))
}

// serve binds addr and serves gs on it, through wrap when not nil (the listener's connection
// caps), until stop; a Serve that ends on its own marks the generation failed.
func (g *generation) serve(ctx context.Context, gs *grpc.Server, addr string, wrap func(net.Listener) net.Listener) (string, error) {
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	if wrap != nil {
		lis = wrap(lis)
	}
	g.servers = append(g.servers, gs)
	g.wg.Go(func() {
		if err := gs.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			g.fail.Do(func() { close(g.failed) })
		}
	})
	return lis.Addr().String(), nil
}

// stop closes live streams, lets in-flight RPCs finish within the grace period and waits for
// every goroutine of the generation. It is safe on a nil generation.
func (g *generation) stop() {
	if g == nil {
		return
	}
	if g.stream != nil {
		g.stream.Shutdown()
	}
	var wg sync.WaitGroup
	for _, gs := range g.servers {
		wg.Go(func() { server.StopGracefully(gs, g.grace) })
	}
	wg.Wait()
	g.cancel()
	g.wg.Wait()
}

func (g *generation) failedChan() <-chan struct{} {
	if g == nil {
		return nil
	}
	return g.failed
}

func (g *generation) hasFailed() bool {
	select {
	case <-g.failed:
		return true
	default:
		return false
	}
}

func (g *generation) describe() string {
	if g.addrs.Stream == "" {
		return "Bootstrap listens on " + g.addrs.Bootstrap + "; the stream listener is not configured"
	}
	return "Bootstrap listens on " + g.addrs.Bootstrap + ", stream on " + g.addrs.Stream
}

// streamServer returns the generation's stream server; nil for no generation or no stream.
func (g *generation) streamServer() *stream.Server {
	if g == nil {
		return nil
	}
	return g.stream
}

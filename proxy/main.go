// Command proxy is the Coxswain data plane. It never talks to the Kubernetes API: it bootstraps
// a SPIFFE identity with its projected ServiceAccount token, receives routing snapshots from the
// controller over mTLS, and keeps serving the last good one through any control-plane outage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/attribute"

	"coxswain.dev/coxswain/discovery/buildinfo"
	"coxswain.dev/coxswain/discovery/tracing"
	"coxswain.dev/coxswain/proxy/internal/admin"
	"coxswain.dev/coxswain/proxy/internal/agent"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
	"coxswain.dev/coxswain/proxy/internal/health"
)

func main() {
	os.Exit(mainCode())
}

// mainCode runs the proxy until SIGTERM or SIGINT and returns the exit code.
func mainCode() int {
	opts, err := parseFlags(os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if opts.printVersion {
		fmt.Println(buildinfo.String("coxswain-proxy"))
		return 0
	}
	log := newLogger(opts.verbosity)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, opts, log); err != nil {
		log.Error(err, "Proxy failed")
		return 1
	}
	return 0
}

// newLogger logs JSON lines to stderr; -v=1 adds the V(1) messages.
func newLogger(verbosity int) logr.Logger {
	handler := slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.Level(-verbosity)})
	return logr.FromSlogHandler(handler)
}

// run serves health and metrics and runs the agent until ctx ends, then drains (see
// process.drain). A permanent agent failure is logged and shown on /readyz; the process keeps
// serving what it has until it is stopped.
func run(ctx context.Context, opts *options, log logr.Logger) error {
	p, err := newProcess(ctx, opts, log)
	if err != nil {
		return err
	}
	return p.run(ctx)
}

// healthShutdownTimeout bounds the health server's shutdown, after the data plane's: its
// clients are probes and scrapes of a few milliseconds. The admin port gets as long: a profile
// in flight is not worth holding the exit for.
const healthShutdownTimeout = time.Second

// process is the proxy's long-running parts, wired together.
type process struct {
	opts    *options
	log     logr.Logger
	plane   *dataplane.DataPlane
	agent   *agent.Agent
	tracker *health.Tracker
	reg     *prometheus.Registry
	lis     net.Listener
	health  *http.Server
	// applied records what the data plane applied, for the admin port, which is nil when
	// --admin-address is empty.
	applied *admin.Recorder
	admin   *admin.Server
	// tracer exports request spans; nil when tracing is off.
	tracer *tracing.Tracer
}

func newProcess(ctx context.Context, opts *options, log logr.Logger) (*process, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tracker, err := health.NewTracker(nil, reg)
	if err != nil {
		return nil, err
	}
	tracer, err := newTracer(opts, reg)
	if err != nil {
		return nil, err
	}
	plane, err := newDataPlane(opts, reg, tracer, log)
	if err != nil {
		return nil, errors.Join(err, shutdownTracer(tracer))
	}
	fail := func(err error) (*process, error) {
		return nil, errors.Join(err, plane.Shutdown(context.WithoutCancel(ctx)), shutdownTracer(tracer))
	}
	applied := admin.NewRecorder(plane, time.Now)
	a, err := newAgent(opts, applied, tracker, log)
	if err != nil {
		return fail(err)
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", opts.healthAddress)
	if err != nil {
		return fail(fmt.Errorf("listen on %s: %w", opts.healthAddress, err))
	}
	var adm *admin.Server
	if opts.admin.address != "" {
		adm, err = admin.Listen(ctx, admin.Options{
			Address: opts.admin.address, TokenFile: opts.admin.tokenFile, Pprof: opts.admin.pprof,
			Applied: applied.Applied, Log: log.WithName("admin"),
		})
		if err != nil {
			return fail(errors.Join(err, lis.Close()))
		}
	}
	return &process{
		opts: opts, log: log, plane: plane, agent: a, tracker: tracker, reg: reg, lis: lis,
		health:  &http.Server{Handler: telemetryHandler(opts, tracker, reg), ReadHeaderTimeout: 5 * time.Second},
		applied: applied, admin: adm, tracer: tracer,
	}, nil
}

// run serves until ctx ends (SIGTERM) or the health server fails, then drains. The agent keeps
// applying snapshots through the drain period, so the connections still arriving are routed
// to the endpoints of the moment.
func (p *process) run(ctx context.Context) error {
	agentCtx, stopAgent := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAgent()
	served := make(chan error, 1)
	go func() { served <- p.health.Serve(p.lis) }()
	agentDone := make(chan error, 1)
	go func() { agentDone <- p.agent.Run(agentCtx) }()
	adminDone := p.serveAdmin()
	defer func() { <-adminDone }()
	p.log.Info("Started", "nodeID", p.opts.nodeID, "scope", p.opts.scope().String(),
		"discoveryEndpoint", p.opts.streamAddress, "bootstrapEndpoint", p.opts.bootstrapAddress,
		"healthAddress", p.lis.Addr().String(), "adminAddress", p.adminAddress())

	serveErr := p.waitForStop(ctx, served, agentDone)
	err := p.drain(stopAgent)
	if err := <-agentDone; err != nil {
		p.log.V(1).Info("Control channel had stopped", "error", err.Error())
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve health: %w", serveErr)
	}
	return err
}

// serveAdmin serves the admin port, when there is one, until drain shuts it down, and closes
// the channel it returns then. A failure of the admin port is logged and leaves traffic alone.
func (p *process) serveAdmin() <-chan struct{} {
	done := make(chan struct{})
	if p.admin == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		if err := p.admin.Serve(); !errors.Is(err, http.ErrServerClosed) {
			p.log.Error(err, "Admin port failed; the proxy serves on without it")
		}
	}()
	return done
}

// adminAddress is where the admin port listens, or "off".
func (p *process) adminAddress() string {
	if p.admin == nil {
		return "off"
	}
	return p.admin.Addr().String()
}

// drain is the proxy's shutdown, so that a rolling upgrade or restart drops no request:
//
//  1. /readyz fails at once (/healthz keeps passing), and for the drain period the proxy
//     serves as before, new connections too, while the endpoints of its Services and the load
//     balancers in front of them stop sending it traffic;
//  2. then the listeners close, HTTP/2 clients get GOAWAY (their streams in flight finish),
//     HTTP/1.1 keep-alive connections get Connection: close on their next response and idle
//     ones are closed, and the process returns as soon as every connection is done;
//  3. at the shutdown timeout what is left (a download or tunnel that never ends) is closed,
//     logged and counted in coxswain_proxy_shutdown_cut_connections_total.
//
// stopAgent ends the control channel once the drain period is over.
func (p *process) drain(stopAgent func()) error {
	start := time.Now()
	p.tracker.Drain()
	p.log.Info("Draining", "drainPeriod", p.opts.drainPeriod.String(), "shutdownTimeout", p.opts.shutdownTimeout.String(),
		"openConnections", p.plane.OpenConnections())
	if p.opts.drainPeriod > 0 {
		time.Sleep(p.opts.drainPeriod)
	}
	stopAgent()
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.shutdownTimeout)
	defer cancel()
	err := p.plane.Shutdown(ctx)
	hctx, cancelHealth := context.WithTimeout(context.Background(), healthShutdownTimeout)
	defer cancelHealth()
	if herr := p.health.Shutdown(hctx); herr != nil {
		_ = p.health.Close() // a probe still open is not worth holding the exit for
	}
	if p.admin != nil {
		_ = p.admin.Shutdown(hctx) // closes what is left at the deadline
	}
	if terr := shutdownTracer(p.tracer); terr != nil {
		p.log.Info("Could not export the last spans", "error", terr.Error())
	}
	p.log.Info("Stopped", "took", time.Since(start).String())
	if err != nil {
		return fmt.Errorf("shut down data plane: %w", err)
	}
	return nil
}

// waitForStop blocks until ctx ends or the health server fails, and returns the server's
// error. An agent that stops for good leaves the process serving its last applied snapshot.
func (p *process) waitForStop(ctx context.Context, served <-chan error, agentDone chan error) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-served:
		return err
	case err := <-agentDone:
		if err != nil {
			p.log.Info("Control channel stopped; serving the last applied snapshot until shutdown", "error", err.Error())
		}
		agentDone <- err // run receives it again
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-served:
		return err
	}
}

// tracerShutdownTimeout bounds the export of the spans still queued at exit.
const tracerShutdownTimeout = 2 * time.Second

// newTracer returns the tracer of --tracing-endpoint, nil when tracing is off, with its drop
// counter on reg. Its spans name this proxy: its pod and namespace, node ID and, for a
// dedicated proxy, its Gateway.
func newTracer(opts *options, reg prometheus.Registerer) (*tracing.Tracer, error) {
	t := opts.tracing.opts
	if t.Endpoint == "" {
		return nil, nil
	}
	t.DroppedSpans = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "coxswain_proxy_tracing_spans_dropped_total",
		Help: "Request spans dropped because the export queue was full (a slow or unreachable collector).",
	})
	if err := reg.Register(t.DroppedSpans); err != nil {
		return nil, err
	}
	t.Attributes = append(t.Attributes, attribute.String("service.instance.id", opts.nodeID))
	if pod := os.Getenv("POD_NAME"); pod != "" {
		t.Attributes = append(t.Attributes, attribute.String("k8s.pod.name", pod))
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		t.Attributes = append(t.Attributes, attribute.String("k8s.namespace.name", ns))
	}
	if opts.gatewayName != "" {
		t.Attributes = append(t.Attributes, attribute.String("coxswain.proxy.gateway", opts.gatewayNamespace+"/"+opts.gatewayName))
	}
	tr, err := tracing.New(t)
	if err != nil {
		return nil, fmt.Errorf("--tracing-endpoint: %w", err)
	}
	return tr, nil
}

// shutdownTracer exports what tr still holds, within tracerShutdownTimeout; nil for no tracer.
func shutdownTracer(tr *tracing.Tracer) error {
	if tr == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracerShutdownTimeout)
	defer cancel()
	return tr.Shutdown(ctx)
}

// newDataPlane builds the HTTP data plane the agent applies snapshots to. Its listeners bind
// each Gateway listener port on --listen-host, shifted by --port-offset; tracer, when not nil,
// traces its requests.
func newDataPlane(opts *options, reg prometheus.Registerer, tracer *tracing.Tracer, log logr.Logger) (*dataplane.DataPlane, error) {
	l := &opts.limits
	engine, err := http1.ParseEngine(opts.http1Engine)
	if err != nil {
		return nil, fmt.Errorf("--http1-engine: %w", err)
	}
	dpOpts := dataplane.Options{
		HTTP1Engine: engine,
		Listener: listener.Options{
			Address: func(port uint32) string {
				return net.JoinHostPort(opts.listenHost, strconv.FormatUint(uint64(port)+uint64(opts.portOffset), 10))
			},
			HeaderReadTimeout:         l.headerReadTimeout,
			IdleTimeout:               l.idleTimeout,
			SendTimeout:               l.sendTimeout,
			MaxHeaderBytes:            l.maxHeaderBytes,
			MaxClientHelloBytes:       l.maxClientHelloBytes,
			UDPIdleTimeout:            l.udpIdleTimeout,
			MaxUDPFlows:               l.maxUDPFlows,
			MaxUDPFlowsPerListener:    l.maxUDPFlowsPerListener,
			MaxUDPFlowsPerClient:      l.maxUDPFlowsPerClient,
			MaxConnections:            l.maxConnections,
			MaxConnectionsPerClient:   l.maxConnsPerClient,
			HTTP2MaxConcurrentStreams: l.http2MaxStreams,
			HTTP2StreamWindow:         int32(l.http2StreamWindow), //nolint:gosec // checked to be at most 1 GiB
			HTTP2ConnectionWindow:     int32(l.http2ConnWindow),   //nolint:gosec // checked to be at most 1 GiB
		},
		Upstream: upstream.Options{
			MaxConnsPerEndpoint:     l.upstreamMaxConns,
			MaxPendingPerEndpoint:   l.upstreamMaxPending,
			PendingTimeout:          l.upstreamPendingTimeout,
			ClientSharePercent:      l.upstreamClientShare,
			RetryBudgetMinPerSecond: l.retryBudgetFloor,
			ReuseQuarantine:         reuseQuarantine(l.upstreamQuarantine),
		},
		Forward: forward.Options{
			MaxRequestBodySize:        l.maxRequestBodyBytes,
			MaxBufferedBodyBytes:      l.maxBufferedBodyBytes,
			MaxRequestsPerConnection:  l.maxRequestsPerConn,
			MaxHeaderCount:            l.maxHeaderCount,
			MaxHeaderBytes:            l.maxHeaderBytes,
			BodyReadTimeout:           l.bodyReadTimeout,
			SendTimeout:               l.sendTimeout,
			BackendIdleTimeout:        l.backendIdleTimeout,
			TunnelIdleTimeout:         l.tunnelIdleTimeout,
			RequestIDHeader:           opts.accessLog.requestIDHeader,
			NoRequestID:               opts.accessLog.requestIDHeader == "",
			ReplaceRequestID:          opts.accessLog.replaceIDs,
			AllowUnderscoresInHeaders: opts.allowUnderscores,
			Tracer:                    tracer,
		},
		Registerer:      reg,
		MemoryWatermark: memoryWatermark(l.memoryWatermark),
	}
	if opts.accessLog.on {
		dpOpts.AccessLog, dpOpts.AccessLogOptions = os.Stdout, opts.accessLog.opts
	}
	plane, err := dataplane.New(log.WithName("dataplane"), dpOpts)
	if err != nil {
		return nil, fmt.Errorf("build data plane: %w", err)
	}
	return plane, nil
}

// memoryWatermark is the flag's watermark, or by default 90% of GOMEMLIMIT (none without it).
func memoryWatermark(flag int64) uint64 {
	if flag > 0 {
		return uint64(flag)
	}
	return listener.DefaultWatermark()
}

// telemetryHandler serves health, readiness and metrics, and the runtime profiles with --pprof.
func telemetryHandler(opts *options, tracker *health.Tracker, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", health.Handler(tracker, reg))
	if opts.pprof {
		dataplane.RegisterPprof(mux)
	}
	return mux
}

func newAgent(opts *options, applier agent.Applier, tracker *health.Tracker, log logr.Logger) (*agent.Agent, error) {
	return agent.New(agent.Config{
		StreamAddress:            opts.streamAddress,
		BootstrapAddress:         opts.bootstrapAddress,
		ServerName:               opts.serverName,
		ControllerNamespace:      opts.controllerNS,
		ControllerServiceAccount: opts.controllerSA,
		TokenPath:                opts.tokenPath,
		TrustBundlePath:          opts.trustBundlePath,
		NodeID:                   opts.nodeID,
		Scope:                    opts.scope(),
		Applier:                  applier,
		Observer:                 tracker,
		Logger:                   log.WithName("agent"),
		SnapshotPath:             opts.snapshotCache,
	})
}

package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"coxswain.dev/coxswain/discovery/tracing"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/proxy/internal/admin"
	"coxswain.dev/coxswain/proxy/internal/agent"
	"coxswain.dev/coxswain/proxy/internal/dataplane/accesslog"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/h1client"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

// defaultDiscoveryHost is the in-cluster name of the controller's discovery Service.
const defaultDiscoveryHost = wellknown.DiscoveryServiceName + "." + wellknown.InstallNamespace + ".svc"

// options are the proxy's command-line flags.
type options struct {
	streamAddress    string
	bootstrapAddress string
	serverName       string
	controllerNS     string
	controllerSA     string
	tokenPath        string
	trustBundlePath  string
	gatewayNamespace string
	gatewayName      string
	nodeID           string
	healthAddress    string
	listenHost       string
	portOffset       uint
	accessLog        accessLog
	tracing          tracingFlags
	pprof            bool
	admin            adminPort
	verbosity        int
	drainPeriod      time.Duration
	shutdownTimeout  time.Duration
	snapshotCache    string
	http1Engine      string
	limits           limits
	// allowUnderscores forwards request fields whose names hold an underscore.
	allowUnderscores bool
	printVersion     bool
}

// accessLog is what the access log writes and how, and the request IDs it records.
type accessLog struct {
	on              bool
	format          string
	fields          string
	queueSize       int
	requestIDHeader string
	replaceIDs      bool
	// parsed by complete
	opts accesslog.Options
}

// register adds the access log and request ID flags to fs.
func (a *accessLog) register(fs *flag.FlagSet) {
	fs.BoolVar(&a.on, "access-log", true, "Write one access log line per request to standard output.")
	fs.StringVar(&a.format, "access-log-format", "json", "Access log line format: json (one object a line) or text (key=value pairs).")
	fs.StringVar(&a.fields, "access-log-fields", "all",
		"Comma-separated access log fields, in the order written, or all: "+strings.Join(accesslog.FieldNames(), ",")+".")
	fs.IntVar(&a.queueSize, "access-log-queue-size", accesslog.DefaultQueueSize,
		"Access log lines that may wait for standard output; lines beyond it are dropped and counted in coxswain_proxy_access_log_dropped_total.")
	fs.StringVar(&a.requestIDHeader, "request-id-header", forward.DefaultRequestIDHeader,
		"Request field that carries each request's ID to the backend and the access log: the client's when valid, generated otherwise; empty turns request IDs off.")
	fs.BoolVar(&a.replaceIDs, "request-id-replace", false, "Generate a request ID for every request, whatever ID the client sent.")
}

// check parses the format and fields and refuses a bad queue size or request ID header.
func (a *accessLog) check() error {
	format, err := accesslog.ParseFormat(a.format)
	if err != nil {
		return fmt.Errorf("--access-log-format: %w", err)
	}
	fields, err := accesslog.ParseFields(a.fields)
	if err != nil {
		return fmt.Errorf("--access-log-fields: %w", err)
	}
	if a.queueSize <= 0 {
		return errors.New("--access-log-queue-size must be positive")
	}
	if a.requestIDHeader != "" {
		if err := forward.CheckRequestIDHeader(a.requestIDHeader); err != nil {
			return fmt.Errorf("--request-id-header: %w", err)
		}
	}
	a.opts = accesslog.Options{Format: format, Fields: fields, QueueSize: a.queueSize}
	return nil
}

// tracingFlags are the shared --tracing-* flags; check sets opts, its Endpoint empty when
// tracing is off.
type tracingFlags struct {
	tracing.Flags
	opts tracing.Options
}

// check refuses a bad endpoint, protocol or ratio when tracing is on.
func (t *tracingFlags) check() error {
	opts, _, err := t.Options(tracing.ServiceProxy)
	t.opts = opts
	return err
}

// adminPort is where the read-only admin port listens and who may use it.
type adminPort struct {
	address   string
	tokenFile string
	pprof     bool
}

// register adds the admin port's flags to fs.
func (a *adminPort) register(fs *flag.FlagSet) {
	fs.StringVar(&a.address, "admin-address", admin.DefaultAddress,
		"Listen address of the read-only admin port (GET / lists its endpoints: the applied snapshot with private keys redacted, and the profiles with --admin-pprof); "+
			"a loopback address, reached with kubectl port-forward, unless --admin-token-file is set; empty turns it off.")
	fs.StringVar(&a.tokenFile, "admin-token-file", "",
		"File holding the bearer token (at least 32 bytes) that every admin request must carry, read again at each request; required for an admin address off the loopback.")
	fs.BoolVar(&a.pprof, "admin-pprof", false, "Serve the Go runtime profiles under /debug/pprof/ on the admin address.")
}

// check refuses an admin address off the loopback without a token, and admin flags without
// an admin address.
func (a *adminPort) check() error {
	if a.address == "" {
		if a.tokenFile != "" || a.pprof {
			return errors.New("--admin-token-file and --admin-pprof need an --admin-address")
		}
		return nil
	}
	if err := admin.CheckAddress(a.address, a.tokenFile != ""); err != nil {
		return fmt.Errorf("--admin-address: %w", err)
	}
	return nil
}

// limits are the data plane's protections against careless and hostile clients and backends.
type limits struct {
	maxConnections      int
	maxConnsPerClient   int
	maxHeaderBytes      int
	maxHeaderCount      int
	maxRequestBodyBytes int64
	headerReadTimeout   time.Duration
	bodyReadTimeout     time.Duration
	sendTimeout         time.Duration
	idleTimeout         time.Duration
	backendIdleTimeout  time.Duration
	tunnelIdleTimeout   time.Duration
	http2MaxStreams     int
	// upstream bounds the requests to one endpoint.
	upstreamMaxConns       int
	upstreamMaxPending     int
	upstreamPendingTimeout time.Duration
	upstreamClientShare    int
	upstreamQuarantine     time.Duration
	maxBufferedBodyBytes   int64
	maxRequestsPerConn     int
	memoryWatermark        int64
	http2StreamWindow      int
	http2ConnWindow        int
	retryBudgetFloor       int
	maxClientHelloBytes    int
	udpIdleTimeout         time.Duration
	maxUDPFlows            int
	maxUDPFlowsPerListener int
	maxUDPFlowsPerClient   int
}

// register adds the limit flags to fs, with the data plane's defaults.
func (l *limits) register(fs *flag.FlagSet) {
	fs.IntVar(&l.maxConnections, "max-connections", listener.DefaultMaxConnections,
		"Open client connections, all listeners together; more are closed on accept.")
	fs.IntVar(&l.maxConnsPerClient, "max-connections-per-client", listener.DefaultMaxConnectionsPerClient,
		"Open client connections of one client IP address, all listeners together; closed on accept beyond it.")
	fs.IntVar(&l.maxHeaderBytes, "max-header-bytes", forward.DefaultMaxHeaderBytes,
		"Size of a request's header fields (also the HTTP/2 header list size); 431 beyond it.")
	fs.IntVar(&l.maxHeaderCount, "max-header-count", forward.DefaultMaxHeaderCount, "Header fields of a request; 431 beyond it.")
	fs.Int64Var(&l.maxRequestBodyBytes, "max-request-body-bytes", 0,
		"Size of a request body; 413 beyond it. 0 is no limit: bodies stream and cost no memory.")
	fs.DurationVar(&l.headerReadTimeout, "header-read-timeout", listener.DefaultHeaderReadTimeout,
		"Time for a client to send a request's header, and a TLS handshake.")
	fs.DurationVar(&l.bodyReadTimeout, "body-read-timeout", forward.DefaultBodyReadTimeout,
		"Time a client may send nothing of a request body it is sending; 408 when no response started.")
	fs.DurationVar(&l.sendTimeout, "send-timeout", forward.DefaultSendTimeout,
		"Time a client may take nothing of a response it is receiving; then its stream or connection is reset.")
	fs.DurationVar(&l.idleTimeout, "idle-timeout", listener.DefaultIdleTimeout, "Time a keep-alive client connection may stay idle.")
	fs.DurationVar(&l.backendIdleTimeout, "backend-idle-timeout", forward.DefaultBackendIdleTimeout,
		"Time a backend may send nothing of a response body it is sending; then the response is aborted.")
	fs.DurationVar(&l.tunnelIdleTimeout, "tunnel-idle-timeout", forward.DefaultTunnelIdleTimeout,
		"Time a WebSocket tunnel may carry nothing either way before it is closed.")
	fs.IntVar(&l.http2MaxStreams, "http2-max-concurrent-streams", listener.DefaultHTTP2MaxConcurrentStreams,
		"Streams open at once on one HTTP/2 client connection.")
	fs.IntVar(&l.upstreamMaxConns, "upstream-max-connections", upstream.DefaultMaxConnsPerEndpoint,
		"Requests in flight to one backend endpoint (one connection each over HTTP/1.1); more wait for a place.")
	fs.IntVar(&l.upstreamMaxPending, "upstream-max-pending", upstream.DefaultMaxPendingPerEndpoint,
		"Requests waiting for a place on one backend endpoint; one more is answered 503 at once.")
	fs.DurationVar(&l.upstreamPendingTimeout, "upstream-pending-timeout", upstream.DefaultPendingTimeout,
		"Time a request may wait for a place on a backend endpoint; then it is answered 503.")
	fs.IntVar(&l.upstreamClientShare, "upstream-client-share-percent", upstream.DefaultClientSharePercent,
		"Percentage of an endpoint's places one client address may hold or wait for; beyond it 503 at once.")
	fs.DurationVar(&l.upstreamQuarantine, "upstream-reuse-quarantine", h1client.DefaultReuseQuarantine,
		"Time an HTTP/1.1 backend connection rests after an answer before it carries another request, so that bytes the backend writes past the answer show first; 0 for none.")
	fs.Int64Var(&l.maxBufferedBodyBytes, "max-buffered-body-bytes", forward.DefaultMaxBufferedBodyBytes,
		"Memory for request bodies held for retries and mirrors, the whole proxy together; a body beyond it is sent once, not mirrored.")
	fs.IntVar(&l.maxRequestsPerConn, "max-requests-per-connection", forward.DefaultMaxRequestsPerConnection,
		"Requests one client connection may make; the last response closes it (HTTP/2 GOAWAY).")
	fs.Int64Var(&l.memoryWatermark, "memory-watermark-bytes", 0,
		"Memory (live heap and stacks) above which new connections and requests are refused; 0 is 90% of GOMEMLIMIT, and none without it.")
	fs.IntVar(&l.http2StreamWindow, "http2-stream-window-bytes", listener.DefaultHTTP2StreamWindow,
		"Request body bytes an HTTP/2 client may send ahead of the backend reading them, per stream.")
	fs.IntVar(&l.http2ConnWindow, "http2-connection-window-bytes", listener.DefaultHTTP2ConnectionWindow,
		"Request body bytes an HTTP/2 client may send ahead of the backends reading them, per connection.")
	fs.IntVar(&l.maxClientHelloBytes, "max-client-hello-bytes", listener.DefaultMaxClientHelloBytes,
		"Bytes a TLS passthrough listener reads of a connection before its ClientHello is complete; the connection is closed beyond it.")
	fs.DurationVar(&l.udpIdleTimeout, "udp-idle-timeout", listener.DefaultUDPIdleTimeout,
		"Time a UDP flow (one client address's datagrams to its backend and back) may carry nothing either way before it ends.")
	fs.IntVar(&l.maxUDPFlows, "max-udp-flows", listener.DefaultMaxUDPFlows,
		"UDP flows, all listeners together; a datagram that would open one more is dropped.")
	fs.IntVar(&l.maxUDPFlowsPerListener, "max-udp-flows-per-listener", listener.DefaultMaxUDPFlowsPerListener,
		"UDP flows of one listener port; a datagram that would open one more on it is dropped.")
	fs.IntVar(&l.maxUDPFlowsPerClient, "max-udp-flows-per-client", listener.DefaultMaxUDPFlowsPerClient,
		"UDP flows of one client IP address, all listeners together; a datagram that would open one more is dropped.")
	fs.IntVar(&l.retryBudgetFloor, "retry-budget-min-per-second", upstream.DefaultRetryBudgetMinPerSecond,
		"Retries a second a cluster may make beyond the fifth of its requests that its budget earns.")
}

// reuseQuarantine is the upstream option of --upstream-reuse-quarantine, whose 0 is none.
func reuseQuarantine(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// check refuses limits that would disable a protection.
func (l *limits) check() error {
	for name, v := range map[string]int64{
		"--max-connections": int64(l.maxConnections), "--max-connections-per-client": int64(l.maxConnsPerClient),
		"--max-header-bytes": int64(l.maxHeaderBytes),
		"--max-header-count": int64(l.maxHeaderCount), "--http2-max-concurrent-streams": int64(l.http2MaxStreams),
		"--header-read-timeout": int64(l.headerReadTimeout), "--body-read-timeout": int64(l.bodyReadTimeout),
		"--send-timeout": int64(l.sendTimeout), "--idle-timeout": int64(l.idleTimeout),
		"--backend-idle-timeout": int64(l.backendIdleTimeout), "--tunnel-idle-timeout": int64(l.tunnelIdleTimeout),
		"--upstream-max-connections": int64(l.upstreamMaxConns), "--upstream-max-pending": int64(l.upstreamMaxPending),
		"--upstream-pending-timeout": int64(l.upstreamPendingTimeout), "--max-buffered-body-bytes": l.maxBufferedBodyBytes,
		"--max-requests-per-connection": int64(l.maxRequestsPerConn),
		"--max-client-hello-bytes":      int64(l.maxClientHelloBytes),
		"--udp-idle-timeout":            int64(l.udpIdleTimeout), "--max-udp-flows": int64(l.maxUDPFlows),
		"--max-udp-flows-per-listener": int64(l.maxUDPFlowsPerListener), "--max-udp-flows-per-client": int64(l.maxUDPFlowsPerClient),
		"--http2-stream-window-bytes": int64(l.http2StreamWindow), "--http2-connection-window-bytes": int64(l.http2ConnWindow),
	} {
		if v <= 0 {
			return fmt.Errorf("%s must be positive", name)
		}
	}
	if l.memoryWatermark < 0 {
		return errors.New("--memory-watermark-bytes must not be negative")
	}
	if l.upstreamQuarantine < 0 {
		return errors.New("--upstream-reuse-quarantine must not be negative")
	}
	if l.http2StreamWindow < 65535 || l.http2ConnWindow < l.http2StreamWindow || l.http2ConnWindow > 1<<30 {
		return errors.New("--http2-stream-window-bytes must be at least 65535 and --http2-connection-window-bytes between it and 1 GiB")
	}
	if l.upstreamClientShare < 1 || l.upstreamClientShare > 100 {
		return errors.New("--upstream-client-share-percent must be between 1 and 100")
	}
	if l.maxRequestBodyBytes < 0 {
		return errors.New("--max-request-body-bytes must not be negative")
	}
	return nil
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.StringVar(&o.streamAddress, "discovery-endpoint", net.JoinHostPort(defaultDiscoveryHost, strconv.Itoa(wellknown.StreamPort)),
		"host:port of the controller's mTLS snapshot stream listener.")
	fs.StringVar(&o.bootstrapAddress, "bootstrap-endpoint", "",
		"host:port of the controller's bootstrap listener; the discovery endpoint's host on the bootstrap port when empty.")
	fs.StringVar(&o.serverName, "discovery-server-name", "",
		"DNS name the controller's certificate must carry; the bootstrap endpoint's host when empty.")
	fs.StringVar(&o.controllerNS, "controller-namespace", wellknown.InstallNamespace,
		"Namespace of the controller, whose SPIFFE ID the stream server must present.")
	fs.StringVar(&o.controllerSA, "controller-service-account", wellknown.ControllerServiceAccount,
		"ServiceAccount of the controller, whose SPIFFE ID the stream server must present.")
	fs.StringVar(&o.tokenPath, "token-path", wellknown.TokenPath, "Projected ServiceAccount token file, re-read on every bootstrap.")
	fs.StringVar(&o.trustBundlePath, "trust-bundle-path", wellknown.TrustBundlePath, "Trust bundle PEM file, re-read on every bootstrap.")
	fs.StringVar(&o.gatewayNamespace, "gateway-namespace", "", "Namespace of the Gateway of a dedicated proxy; empty for the shared pool.")
	fs.StringVar(&o.gatewayName, "gateway-name", "", "Name of the Gateway of a dedicated proxy; empty for the shared pool.")
	fs.StringVar(&o.nodeID, "node-id", "", "Node ID of this proxy; $POD_NAME (or the host name) with a random suffix when empty.")
	fs.StringVar(&o.healthAddress, "health-address", ":8081", "Listen address of /healthz, /readyz and /metrics.")
	fs.StringVar(&o.listenHost, "listen-host", "", "Host the Gateway listeners bind; all interfaces when empty.")
	fs.UintVar(&o.portOffset, "port-offset", 0,
		"Added to every Gateway listener port when binding, for a proxy that may not bind ports under 1024.")
	o.accessLog.register(fs)
	o.tracing.Register(fs, "request spans")
	o.tracing.RegisterParentSampling(fs)
	fs.BoolVar(&o.pprof, "pprof", false,
		"Serve runtime profiles under /debug/pprof/ on the health address, unauthenticated and reachable from the pod network; --admin-pprof serves them on the admin address instead.")
	o.admin.register(fs)
	fs.IntVar(&o.verbosity, "v", 0, "Log verbosity: 0 or 1.")
	fs.DurationVar(&o.drainPeriod, "drain-period", defaultDrainPeriod,
		"How long the proxy keeps serving after SIGTERM, with /readyz failing and its listeners open, so that Service endpoints and load balancers stop sending it connections before it closes them; 0 skips it.")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout,
		"How long, after the drain period, connections get to finish their requests, downloads and WebSocket tunnels; then the rest are closed.")
	o.limits.register(fs)
	fs.BoolVar(&o.allowUnderscores, "allow-underscores-in-headers", false,
		"Forward request header fields whose names hold an underscore (X_Auth_User), which are dropped otherwise: CGI and the frameworks built on it read them as the dashed name.")
	fs.StringVar(&o.http1Engine, "http1-engine", string(http1.DefaultEngine),
		"HTTP/1.1 engine of the listeners and of the connections to backends: native (the proxy's own strict codec) or nethttp (Go's net/http).")
	fs.StringVar(&o.snapshotCache, "snapshot-cache", "",
		"File on a memory-backed volume (tmpfs) where the last good snapshot is kept and restored from on restart; off when empty.")
	fs.BoolVar(&o.printVersion, "version", false, "Print the version and revision, and exit.")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, o.complete()
}

// Defaults of the drain on SIGTERM. The pod's terminationGracePeriodSeconds must exceed their
// sum (internal/provision renders both, with a margin).
const (
	defaultDrainPeriod     = 5 * time.Second
	defaultShutdownTimeout = 10 * time.Second
)

// complete fills in the defaults that depend on other flags.
func (o *options) complete() error {
	if err := o.limits.check(); err != nil {
		return err
	}
	if o.drainPeriod < 0 {
		return errors.New("--drain-period must not be negative")
	}
	if o.shutdownTimeout <= 0 {
		return errors.New("--shutdown-timeout must be positive")
	}
	if err := o.accessLog.check(); err != nil {
		return err
	}
	if err := o.admin.check(); err != nil {
		return err
	}
	if err := o.tracing.check(); err != nil {
		return err
	}
	if _, err := http1.ParseEngine(o.http1Engine); err != nil {
		return fmt.Errorf("--http1-engine: %w", err)
	}
	if (o.gatewayNamespace == "") != (o.gatewayName == "") {
		return errors.New("--gateway-namespace and --gateway-name go together")
	}
	if o.bootstrapAddress == "" {
		host, _, err := net.SplitHostPort(o.streamAddress)
		if err != nil {
			return fmt.Errorf("--discovery-endpoint: %w", err)
		}
		o.bootstrapAddress = net.JoinHostPort(host, strconv.Itoa(wellknown.BootstrapPort))
	}
	if o.snapshotCache != "" {
		if err := requireMemoryBacked(filepath.Dir(o.snapshotCache)); err != nil {
			return fmt.Errorf("--snapshot-cache: %w", err)
		}
	}
	if o.nodeID == "" {
		id, err := defaultNodeID()
		if err != nil {
			return err
		}
		o.nodeID = id
	}
	return nil
}

// defaultNodeID is the pod name, or else the host name, with a random suffix that tells apart
// the instances of one pod name across restarts.
func defaultNodeID() (string, error) {
	name := os.Getenv("POD_NAME")
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("node ID: %w", err)
		}
		name = h
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return "", fmt.Errorf("node ID: %w", err)
	}
	return name + "-" + hex.EncodeToString(suffix), nil
}

func (o *options) scope() agent.Scope {
	if o.gatewayName != "" {
		return agent.GatewayScope(o.gatewayNamespace, o.gatewayName)
	}
	return agent.SharedPoolScope()
}

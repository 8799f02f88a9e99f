package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"coxswain.dev/coxswain/proxy/internal/dataplane/accesslog"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
	"coxswain.dev/coxswain/proxy/internal/dataplane/metrics"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// ErrShutdown refuses an Apply after Shutdown.
var ErrShutdown = errors.New("data plane is shut down")

// Options configure the data plane; zero values take each part's defaults.
type Options struct {
	// HTTP1Engine serves HTTP/1.1 on the listeners and speaks it to backends; it overrides the
	// Engine of Listener and Upstream. http1.DefaultEngine when empty.
	HTTP1Engine http1.Engine
	Listener    listener.Options
	Upstream    upstream.Options
	// Forward tunes the request path; its AccessLog and Metrics are set from the fields below.
	Forward forward.Options
	// AccessLog, when set, receives one line per request, as AccessLogOptions say.
	AccessLog        io.Writer
	AccessLogOptions accesslog.Options
	// Registerer, when set, gets the data plane's metrics.
	Registerer prometheus.Registerer
	// MemoryWatermark, when set, is the memory (live heap and goroutine stacks) above which
	// the proxy refuses new connections and requests; zero is no watermark.
	MemoryWatermark uint64
}

// DataPlane serves the routing state of the last resource set applied. It implements the
// agent's Applier.
type DataPlane struct {
	log       logr.Logger
	handler   *forward.Handler
	listeners *listener.Manager
	pool      *upstream.Pool
	accessLog *accesslog.Logger
	overload  *listener.Overload
	// stopOverload ends the overload manager's sampling; overloadDone closes once it ended.
	stopOverload context.CancelFunc
	overloadDone chan struct{}
	mu           sync.Mutex
	shutdown     bool
	// cut counts the connections Shutdown closed because its context ended before they did.
	cut atomic.Int64
}

// New returns a data plane that serves nothing until the first Apply.
func New(log logr.Logger, opts Options) (*DataPlane, error) {
	if opts.Listener.MaxHeaderCount == 0 && opts.Forward.MaxHeaderCount > 0 {
		// One limit, --max-header-count: the native codec refuses where the handler does. The
		// handler counts the fields but Host, which the codec counts.
		opts.Listener.MaxHeaderCount = opts.Forward.MaxHeaderCount + 1
	}
	if opts.HTTP1Engine != "" {
		opts.Listener.Engine, opts.Upstream.Engine = opts.HTTP1Engine, opts.HTTP1Engine
	}
	d := &DataPlane{log: log, pool: upstream.NewPool(opts.Upstream)}
	if opts.AccessLog != nil {
		d.accessLog = accesslog.New(opts.AccessLog, opts.AccessLogOptions)
		opts.Forward.AccessLog = d.accessLog
	}
	if opts.Registerer != nil {
		m, err := metrics.New(opts.Registerer, func() float64 { return d.listeners.OpenConnections() })
		if err != nil {
			return nil, err
		}
		opts.Forward.Metrics = m
		err = metrics.RegisterGauges(opts.Registerer, metrics.Gauge{
			Name:  "coxswain_proxy_upstream_pending_requests",
			Help:  "Requests waiting for a place on an endpoint whose requests in flight are at their limit.",
			Value: d.pool.Pending,
		}, metrics.Gauge{
			Name:  "coxswain_proxy_buffered_body_bytes",
			Help:  "Memory held in request bodies buffered for retries and mirrors, against --max-buffered-body-bytes.",
			Value: func() float64 { return d.handler.BufferedBodyBytes() },
		})
		if err != nil {
			return nil, err
		}
		err = metrics.RegisterCounters(opts.Registerer, metrics.Counter{
			Name:  "coxswain_proxy_shutdown_cut_connections_total",
			Help:  "Client connections closed by force at shutdown because they were still open when --shutdown-timeout ended.",
			Value: func() float64 { return float64(d.cut.Load()) },
		})
		if err != nil {
			return nil, err
		}
		if d.accessLog != nil {
			err = metrics.RegisterCounters(opts.Registerer, metrics.Counter{
				Name:  "coxswain_proxy_access_log_dropped_total",
				Help:  "Access log lines dropped because the writer fell behind and the queue (--access-log-queue-size) was full.",
				Value: func() float64 { return float64(d.accessLog.Dropped()) },
			})
			if err != nil {
				return nil, err
			}
		}
		opts.Listener.ConnectionRefused = m.ConnectionRefused
		opts.Listener.ClientConnectionRefused = m.ClientConnectionRefused
	}
	if err := d.startOverload(&opts); err != nil {
		return nil, err
	}
	d.handler = forward.NewHandler(opts.Forward)
	d.listeners = listener.NewManager(log.WithName("listener"), d.handler, opts.Listener)
	return d, nil
}

// startOverload starts the overload manager when opts has a memory watermark, and hands it
// to the listeners and the handler.
func (d *DataPlane) startOverload(opts *Options) error {
	m := opts.Forward.Metrics
	d.overload = listener.NewOverload(opts.MemoryWatermark, m.OverloadRefused)
	d.overloadDone = make(chan struct{})
	if d.overload == nil {
		close(d.overloadDone)
		d.stopOverload = func() {}
		return nil
	}
	if opts.Registerer != nil {
		err := metrics.RegisterGauges(opts.Registerer, metrics.Gauge{
			Name:  "coxswain_proxy_overloaded",
			Help:  "1 while the proxy's memory is above its watermark and new connections and requests are refused, 0 otherwise.",
			Value: d.overload.Gauge,
		})
		if err != nil {
			return err
		}
	}
	opts.Listener.Overload = d.overload
	opts.Forward.Overloaded = d.overload.Overloaded
	ctx, cancel := context.WithCancel(context.Background())
	d.stopOverload = cancel
	go func() {
		defer close(d.overloadDone)
		d.overload.Run(ctx)
	}()
	d.log.Info("Started the overload manager", "memoryWatermark", opts.MemoryWatermark)
	return nil
}

// Apply validates set, compiles it into a routing table, binds the ports it adds and swaps the
// table in with one atomic store; requests in flight finish on the table they started with.
// The table is derived from the one serving (router.Update): only what set changed is
// compiled, and the clusters it did not change keep their upstream state. Ports the table
// drops are drained in the background. On error nothing changes and the last good table keeps
// serving.
func (d *DataPlane) Apply(_ context.Context, set *resource.Set) error {
	if set == nil {
		return errors.New("apply: nil resource set")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shutdown {
		return ErrShutdown
	}
	start := time.Now()
	prev := d.handler.Current()
	var prevTable *router.Table
	var prevUpstreams *upstream.Set
	if prev != nil {
		prevTable, prevUpstreams = prev.Table, prev.Upstreams
	}
	table, err := router.Update(prevTable, set.All())
	if err != nil {
		return fmt.Errorf("apply version %s: %w", set.Version(), err)
	}
	plan, err := d.listeners.Prepare(table)
	if err != nil {
		return fmt.Errorf("apply version %s: %w", set.Version(), err)
	}
	state := &forward.State{Table: table, Upstreams: d.pool.Build(prevUpstreams, table)}
	d.handler.Swap(state)
	plan.Commit()
	d.pool.Retire(prevUpstreams, state.Upstreams)
	d.logApplied(set.Version(), table, time.Since(start))
	return nil
}

func (d *DataPlane) logApplied(version string, table *router.Table, took time.Duration) {
	if len(table.Skipped) > 0 {
		d.log.Info("Skipped listeners whose protocol differs from their port's", "version", version, "listeners", table.Skipped)
	}
	d.log.V(1).Info("Applied routing table", "version", version, "ports", len(table.Ports()),
		"routes", table.Routes(), "clusters", table.ClusterCount(), "took", took.String())
}

// Shutdown drains the data plane: listeners stop accepting, HTTP/1.1 keep-alive connections
// close after their current response and idle ones at once, HTTP/2 clients are told to go away
// (GOAWAY) while their streams finish, and requests, long downloads and WebSocket tunnels in
// flight get until ctx ends. It returns as soon as every connection is done; when ctx ends
// first it closes what is left, and logs and counts the connections it cut, which is not an
// error. Apply fails afterwards, and a second Shutdown does nothing.
func (d *DataPlane) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	already := d.shutdown
	d.shutdown = true
	d.mu.Unlock()
	if already {
		return nil
	}
	start := time.Now()
	d.listeners.StopAccepting()
	d.log.Info("Closed listeners", "openConnections", d.listeners.OpenConnections())
	grace, cut := d.grace(ctx)
	err := d.listeners.Shutdown(grace)
	if !d.handler.Wait(grace.Done()) {
		d.log.Info("Left background exchanges running after the drain")
	}
	if n := cut(); n > 0 {
		d.cut.Add(n)
		d.log.Info("Cut connections at the shutdown timeout", "connections", n, "took", time.Since(start).String())
	} else {
		d.log.Info("Drained connections", "took", time.Since(start).String())
	}
	d.stopOverload()
	<-d.overloadDone
	d.pool.Close()
	if d.accessLog != nil {
		err = errors.Join(err, d.accessLog.Close())
	}
	return err
}

// grace returns the context the drain waits under, which ends when ctx does but only once the
// connections still open at that moment have been counted: the count is what the end of the
// drain cuts. done stops the watch and returns that count, 0 when ctx did not end.
func (d *DataPlane) grace(ctx context.Context) (grace context.Context, done func() int64) {
	grace, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := make(chan struct{})
	var cut int64
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			cut = int64(d.listeners.OpenConnections())
			cancel()
		case <-stop:
		}
	}()
	return grace, func() int64 {
		close(stop)
		<-watched
		cancel()
		return cut
	}
}

// Addr returns the address a table port is bound to, for tests and the benchmark harness.
func (d *DataPlane) Addr(port uint32) (string, bool) {
	a, ok := d.listeners.Addr(port)
	if !ok {
		return "", false
	}
	return a.String(), true
}

// OpenConnections returns the number of open client connections, all ports together.
func (d *DataPlane) OpenConnections() int { return int(d.listeners.OpenConnections()) }

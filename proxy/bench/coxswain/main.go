// Command coxswain runs the data plane alone for the benchmark: it builds a resource set of
// -routes routes (snaptest.ScaleRoutes) to one backend, served on an HTTP and an HTTPS
// listener, applies it as the agent would, and serves until SIGTERM, then drains. It prints
// the time the apply took and the heap it holds on stderr. -http1-engine chooses the HTTP/1.1
// engine (native or nethttp), as the proxy's --http1-engine does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

type flags struct {
	httpAddr, httpsAddr, backend, certFile, keyFile, accessLog, cpuProfile, pprofAddr, engine string
	routes, maxConnsPerClient                                                                 int
}

func main() {
	var f flags
	flag.StringVar(&f.httpAddr, "http", "127.0.0.1:18081", "HTTP listener address")
	flag.StringVar(&f.httpsAddr, "https", "127.0.0.1:18443", "HTTPS listener address")
	flag.StringVar(&f.backend, "backend", "127.0.0.1:18080", "backend address")
	flag.StringVar(&f.certFile, "cert", "", "PEM certificate chain for HTTPS (no HTTPS listener when empty)")
	flag.StringVar(&f.keyFile, "key", "", "PEM private key for HTTPS")
	flag.StringVar(&f.accessLog, "access-log", "", "access log file (none when empty)")
	flag.IntVar(&f.routes, "routes", 1, "number of routes")
	// Every client of the benchmark is 127.0.0.1: its 10,064 connections of the idle scenario
	// would pass the proxy's default per-client cap (a quarter of the connection limit).
	flag.IntVar(&f.maxConnsPerClient, "max-connections-per-client", listener.DefaultMaxConnections,
		"open connections one client IP address may hold (the proxy's --max-connections-per-client)")
	flag.StringVar(&f.engine, "http1-engine", string(http1.DefaultEngine), "HTTP/1.1 engine of the listeners and of the connections to the backend: native or nethttp")
	flag.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile from the first request to shutdown to this file")
	flag.StringVar(&f.pprofAddr, "pprof", "", "serve /debug/pprof/ on this loopback address, to profile a chosen window (none when empty)")
	flag.Parse()
	if err := run(f); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(f flags) error {
	engine, err := http1.ParseEngine(f.engine)
	if err != nil {
		return err
	}
	set, err := resources(f)
	if err != nil {
		return err
	}
	opts := dataplane.Options{
		HTTP1Engine: engine,
		Listener: listener.Options{
			Address: func(port uint32) string {
				if port == 443 {
					return f.httpsAddr
				}
				return f.httpAddr
			},
			MaxConnectionsPerClient: f.maxConnsPerClient,
		},
		Registerer: prometheus.NewRegistry(),
	}
	if f.accessLog != "" {
		w, err := os.Create(f.accessLog)
		if err != nil {
			return err
		}
		defer func() { _ = w.Close() }()
		opts.AccessLog = w
	}
	d, err := dataplane.New(logr.Discard(), opts)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := d.Apply(context.Background(), set); err != nil {
		return err
	}
	took := time.Since(start)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(os.Stderr, "applied engine=%s routes=%d apply_ms=%.1f heap_mib=%.1f\n", engine, f.routes, float64(took.Microseconds())/1000, float64(ms.HeapAlloc)/(1<<20))
	if f.cpuProfile != "" {
		stopProfile, err := profile(f.cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	if f.pprofAddr != "" {
		stopPprof, err := servePprof(f.pprofAddr)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	drain, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return d.Shutdown(drain)
}

// resources builds the benchmark's resource set.
func resources(f flags) (*resource.Set, error) {
	routes := snaptest.ScaleRoutes(f.routes, "bench/app:80")
	cluster, err := snaptest.NewCluster("bench/app:80", f.backend)
	if err != nil {
		return nil, err
	}
	msgs := []proto.Message{snaptest.HTTP("bench/gw", 80, snaptest.VHost("http", "", routes...)), cluster}
	if f.certFile != "" {
		cert, err := certificate(f.certFile, f.keyFile)
		if err != nil {
			return nil, err
		}
		vh := snaptest.VHost("https", "", routes...)
		vh.Certificates = []string{cert.GetName()}
		msgs = append(msgs, snaptest.Listener("bench/gw", 443, discoveryv1.Protocol_PROTOCOL_HTTPS, vh), cert)
	}
	return set(msgs)
}

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
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"coxswain.dev/coxswain/proxy/internal/agent"
	"coxswain.dev/coxswain/proxy/internal/health"
	"coxswain.dev/coxswain/proxy/internal/store"
)

func main() {
	opts, err := parseFlags(os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		return
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := newLogger(opts.verbosity)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, opts, log); err != nil {
		log.Error(err, "Proxy failed")
		os.Exit(1)
	}
}

// newLogger logs JSON lines to stderr; -v=1 adds the V(1) messages.
func newLogger(verbosity int) logr.Logger {
	handler := slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.Level(-verbosity)})
	return logr.FromSlogHandler(handler)
}

// run serves health and metrics and runs the agent until ctx ends, then shuts down within the
// shutdown timeout. A permanent agent failure is logged and shown on /readyz; the process keeps
// serving what it has until it is stopped.
func run(ctx context.Context, opts *options, log logr.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tracker, err := health.NewTracker(nil, reg)
	if err != nil {
		return err
	}
	routes := store.New(log.WithName("store"))
	a, err := newAgent(opts, routes, tracker, log)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", opts.healthAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", opts.healthAddress, err)
	}
	srv := &http.Server{Handler: health.Handler(tracker, reg), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Info("Started", "nodeID", opts.nodeID, "scope", opts.scope().String(),
		"discoveryEndpoint", opts.streamAddress, "bootstrapEndpoint", opts.bootstrapAddress, "healthAddress", lis.Addr().String())

	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(ctx) }()
	return wait(ctx, opts, log, srv, served, agentDone)
}

// wait blocks until ctx ends or the health server fails, then stops both.
func wait(ctx context.Context, opts *options, log logr.Logger, srv *http.Server, served, agentDone <-chan error) error {
	var serveErr error
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case serveErr = <-served:
			done = true
		case err := <-agentDone:
			agentDone = nil // keep serving the last good state and the reason on /readyz
			if err != nil {
				log.Info("Control channel stopped; serving the last applied snapshot until shutdown", "error", err.Error())
			}
		}
	}
	log.Info("Shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if agentDone != nil {
		<-agentDone
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve health: %w", serveErr)
	}
	if err != nil {
		return fmt.Errorf("shut down health server: %w", err)
	}
	return nil
}

func newAgent(opts *options, applier agent.Applier, tracker *health.Tracker, log logr.Logger) (*agent.Agent, error) {
	controllerID, err := opts.controllerSPIFFEID()
	if err != nil {
		return nil, err
	}
	return agent.New(agent.Config{
		StreamAddress:    opts.streamAddress,
		BootstrapAddress: opts.bootstrapAddress,
		ServerName:       opts.serverName,
		ControllerID:     controllerID,
		TokenPath:        opts.tokenPath,
		TrustBundlePath:  opts.trustBundlePath,
		NodeID:           opts.nodeID,
		Scope:            opts.scope(),
		Applier:          applier,
		Observer:         tracker,
		Logger:           log.WithName("agent"),
	})
}

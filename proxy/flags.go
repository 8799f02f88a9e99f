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
	"time"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/proxy/internal/agent"
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
	accessLog        bool
	pprof            bool
	verbosity        int
	shutdownTimeout  time.Duration
	snapshotCache    string
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
	fs.BoolVar(&o.accessLog, "access-log", true, "Write one JSON access log line per request to standard output.")
	fs.BoolVar(&o.pprof, "pprof", false, "Serve runtime profiles under /debug/pprof/ on the health address.")
	fs.IntVar(&o.verbosity, "v", 0, "Log verbosity: 0 or 1.")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "How long to drain on SIGTERM.")
	fs.StringVar(&o.snapshotCache, "snapshot-cache", "",
		"File on a memory-backed volume (tmpfs) where the last good snapshot is kept and restored from on restart; off when empty.")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, o.complete()
}

// complete fills in the defaults that depend on other flags.
func (o *options) complete() error {
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

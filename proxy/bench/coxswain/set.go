package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"time"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

func certificate(certFile, keyFile string) (*discoveryv1.Certificate, error) {
	chain, err := os.ReadFile(certFile) //nolint:gosec // the operator names the file
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(keyFile) //nolint:gosec // the operator names the file
	if err != nil {
		return nil, err
	}
	return &discoveryv1.Certificate{Name: "bench/cert", CertificateChainPem: chain, PrivateKeyPem: key}, nil
}

func set(msgs []proto.Message) (*resource.Set, error) {
	res, err := snaptest.NewResources(msgs...)
	if err != nil {
		return nil, err
	}
	return resource.NewSet("bench", res)
}

// profile starts a CPU profile written to path; the returned function stops it.
func profile(path string) (func(), error) {
	f, err := os.Create(path) //nolint:gosec // the operator names the file
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// servePprof serves the data plane's profiling endpoints on addr; the returned function stops
// the server.
func servePprof(addr string) (func(), error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	dataplane.RegisterPprof(mux)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

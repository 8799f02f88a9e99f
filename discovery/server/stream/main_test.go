package stream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	sharedID = "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy"
	webID    = "spiffe://cluster.local/ns/prod/sa/web-coxswain"
	apiID    = "spiffe://cluster.local/ns/prod/sa/api-coxswain"
)

var (
	webScope = cache.Gateway("prod", "web")
	apiScope = cache.Gateway("prod", "api")
)

// scopeTable is a ScopeAuthority over "namespace/name" -> ServiceAccount; err, when set, is
// answered for every Gateway.
type scopeTable struct {
	mu  sync.Mutex
	sas map[string]string
	err error
}

func (s *scopeTable) ExpectedServiceAccount(namespace, name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return "", s.err
	}
	sa, ok := s.sas[namespace+"/"+name]
	if !ok {
		return "", fmt.Errorf("%w: %s/%s", ErrUnknownGateway, namespace, name)
	}
	return sa, nil
}

func (s *scopeTable) set(key, sa string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sa == "" {
		delete(s.sas, key)
		return
	}
	s.sas[key] = sa
}

// env is a stream server on a loopback mTLS listener with a cache holding one snapshot per
// known scope.
type env struct {
	pki      *servertest.PKI
	cache    *cache.Cache
	scopes   *scopeTable
	registry *prometheus.Registry
	srv      *Server
	gs       *grpc.Server
	addr     string
}

func newEnv(t *testing.T, configure ...func(*Config)) *env {
	t.Helper()
	return newEnvTLS(t, nil, configure...)
}

// newEnvTLS is newEnv with the listener's TLS config, when serverTLS is not nil, made by it.
func newEnvTLS(t *testing.T, serverTLS func(*servertest.PKI) *tls.Config, configure ...func(*Config)) *env {
	t.Helper()
	e := &env{
		pki:      servertest.NewPKI(t),
		cache:    cache.New(nil),
		scopes:   &scopeTable{sas: map[string]string{"prod/web": "web-coxswain", "prod/api": "api-coxswain"}},
		registry: prometheus.NewRegistry(),
	}
	cfg := Config{
		TrustDomain: e.pki.TD, Bundles: e.pki.Bundle, Cache: e.cache, Scopes: e.scopes,
		Registerer: e.registry, Logger: testr.New(t).WithName("stream"),
	}
	for _, c := range configure {
		c(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	tlsConfig := e.pki.StreamServerTLS()
	if serverTLS != nil {
		tlsConfig = serverTLS(e.pki)
	}
	gs, err := srv.NewGRPCServer(tlsConfig)
	if err != nil {
		t.Fatal(err)
	}
	e.gs, e.addr = gs, serveListener(t, srv, gs)
	for _, s := range []cache.Scope{cache.SharedPool(), webScope, apiScope} {
		e.set(t, s, map[string]string{"listener": s.String()})
	}
	return e
}

// serveListener serves gs behind srv's connection caps on a fresh loopback listener until the
// test ends and returns its address.
func serveListener(t *testing.T, srv *Server, gs *grpc.Server) string {
	t.Helper()
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gs.Serve(srv.Listener(lis)) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// set replaces the resources of scope with key -> string payloads.
func (e *env) set(t *testing.T, scope cache.Scope, resources map[string]string) bool {
	t.Helper()
	var rs []*discoveryv1.Resource
	for k, v := range resources {
		r, err := cache.NewResource(k, wrapperspb.String(v))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	changed, err := e.cache.Set(scope, rs)
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

// client connects with cert over mTLS.
func (e *env) client(t *testing.T, cert *tls.Certificate) discoveryv1.DiscoveryClient {
	t.Helper()
	return e.clientTLS(t, e.pki.StreamClientTLS(cert))
}

func (e *env) clientTLS(t *testing.T, cfg *tls.Config) discoveryv1.DiscoveryClient {
	t.Helper()
	return discoveryv1.NewDiscoveryClient(servertest.Dial(t, e.addr, cfg))
}

// proxy is one stream of a test client.
type proxy struct {
	t      *testing.T
	stream discoveryv1.Discovery_StreamClient
	// err is why the stream could not open.
	err error
}

func subscribeMessage(nodeID string, scope cache.Scope) *discoveryv1.ClientMessage {
	return &discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Subscribe{Subscribe: &discoveryv1.Subscribe{
		WireVersion: discoveryv1.WireVersion, NodeId: nodeID, Scope: scope.Proto(),
	}}}
}

// open starts a stream and sends first, if not nil. A stream that cannot open keeps the error
// for recv.
func open(t *testing.T, c discoveryv1.DiscoveryClient, first *discoveryv1.ClientMessage) *proxy {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	stream, err := c.Stream(ctx)
	if err != nil {
		return &proxy{t: t, err: err}
	}
	if first != nil {
		if err := stream.Send(first); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
	}
	return &proxy{t: t, stream: stream}
}

func (e *env) subscribe(t *testing.T, id, nodeID string, scope cache.Scope) *proxy {
	t.Helper()
	return open(t, e.client(t, e.pki.SVID(t, id)), subscribeMessage(nodeID, scope))
}

func (p *proxy) recv() (*discoveryv1.Snapshot, error) {
	if p.err != nil {
		return nil, p.err
	}
	msg, err := p.stream.Recv()
	if err != nil {
		return nil, err
	}
	return msg.GetSnapshot(), nil
}

func (p *proxy) mustRecv() *discoveryv1.Snapshot {
	p.t.Helper()
	snap, err := p.recv()
	if err != nil {
		p.t.Fatalf("receive: %v", err)
	}
	return snap
}

func (p *proxy) ack(s *discoveryv1.Snapshot) {
	p.t.Helper()
	p.send(&discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Ack{Ack: &discoveryv1.Ack{
		Version: s.GetVersion(), Nonce: s.GetNonce(),
	}}})
}

func (p *proxy) nack(s *discoveryv1.Snapshot, detail string) {
	p.t.Helper()
	p.send(&discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Nack{Nack: &discoveryv1.Nack{
		Version: s.GetVersion(), Nonce: s.GetNonce(), Detail: detail,
	}}})
}

func (p *proxy) send(m *discoveryv1.ClientMessage) {
	p.t.Helper()
	if err := p.stream.Send(m); err != nil {
		p.t.Fatalf("send: %v", err)
	}
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

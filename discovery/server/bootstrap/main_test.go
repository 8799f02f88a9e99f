package bootstrap

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/discovery/wellknown"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sharedProxy is the principal of a shared-pool proxy pod.
var sharedProxy = Principal{
	Namespace: wellknown.InstallNamespace, ServiceAccount: wellknown.SharedProxyServiceAccount,
	PodName: "shared-proxy-0", PodUID: "uid-0",
}

// fakeAuthenticator answers every token with one principal or error. When gate is set, it waits
// for gate to close first.
type fakeAuthenticator struct {
	principal Principal
	err       error
	gate      chan struct{}
	calls     atomic.Int32
}

func (f *fakeAuthenticator) Authenticate(ctx context.Context, _ string) (Principal, error) {
	f.calls.Add(1)
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return Principal{}, ctx.Err()
		}
	}
	return f.principal, f.err
}

// allowlist holds "namespace/serviceaccount" entries.
type allowlist map[string]bool

func (a allowlist) Allowed(namespace, sa string) bool { return a[namespace+"/"+sa] }

type recorder struct {
	mu         sync.Mutex
	rejections []Rejection
}

func (r *recorder) BootstrapRejected(_ context.Context, rej Rejection) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejections = append(r.rejections, rej)
}

func (r *recorder) all() []Rejection {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Rejection(nil), r.rejections...)
}

// env is a bootstrap service on a loopback TLS listener and a client of it.
type env struct {
	pki      *servertest.PKI
	auth     *fakeAuthenticator
	reporter *recorder
	registry *prometheus.Registry
	svc      *Service
	conn     *grpc.ClientConn
	client   discoveryv1.DiscoveryClient
}

func newEnv(t *testing.T, configure ...func(*Config)) *env {
	t.Helper()
	e := &env{
		pki:      servertest.NewPKI(t),
		auth:     &fakeAuthenticator{principal: sharedProxy},
		reporter: &recorder{},
		registry: prometheus.NewRegistry(),
	}
	cfg := Config{
		TrustDomain:   e.pki.TD,
		Authenticator: e.auth,
		Allowlist:     allowlist{sharedProxy.Namespace + "/" + sharedProxy.ServiceAccount: true},
		CA:            StaticCA(e.pki.CA, mustBundle(t, e.pki)),
		Reporter:      e.reporter,
		Registerer:    e.registry,
		Logger:        testr.New(t).WithName("bootstrap"),
	}
	for _, c := range configure {
		c(&cfg)
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	gs, err := svc.NewGRPCServer(e.pki.BootstrapServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	e.conn = servertest.Dial(t, servertest.Serve(t, gs), e.pki.BootstrapClientTLS())
	e.client = discoveryv1.NewDiscoveryClient(e.conn)
	return e
}

package agent_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/proxy/internal/agent"
	"coxswain.dev/coxswain/proxy/internal/health"
	"coxswain.dev/coxswain/proxy/internal/resource"
	"coxswain.dev/coxswain/proxy/internal/store"
)

// fastBackoff keeps retries quick on loopback.
var fastBackoff = agent.Backoff{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: 0.2}

// proxy is an agent wired as main wires it: the in-memory store as Applier, a health tracker
// as Observer and the health handler on a loopback HTTP server.
type proxy struct {
	t       *testing.T
	cfg     agent.Config
	store   *store.Store
	applier *applier
	tracker *health.Tracker
	states  *stateLog
	readyz  string
	cancel  context.CancelFunc
	done    chan error
}

func newProxy(t *testing.T, c *controller, configure ...func(*agent.Config)) *proxy {
	t.Helper()
	dir := t.TempDir()
	cfg := agent.Config{
		StreamAddress:    c.streamAddr,
		BootstrapAddress: c.bootstrapAddr,
		ServerName:       servertest.ServerName,
		TokenPath:        writeFile(t, dir, "token", []byte(sharedToken+"\n")),
		TrustBundlePath:  writeFile(t, dir, "ca.crt", c.bundlePEM()),
		NodeID:           "proxy-0-abcd",
		Scope:            agent.SharedPoolScope(),
		Logger:           testr.New(t).WithName("agent"),
		Backoff:          fastBackoff,
	}
	for _, f := range configure {
		f(&cfg)
	}
	p := &proxy{t: t, store: store.New(logr.Discard())}
	p.applier = &applier{store: p.store}
	tracker, err := health.NewTracker(cfg.Clock, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	p.tracker = tracker
	p.states = &stateLog{Tracker: tracker}
	cfg.Applier, cfg.Observer = p.applier, p.states
	p.cfg = cfg
	srv := httptest.NewServer(health.Handler(tracker, prometheus.NewRegistry()))
	t.Cleanup(srv.Close)
	p.readyz = srv.URL + "/readyz"
	return p
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// run starts the agent; it stops when the test ends.
func (p *proxy) run() {
	p.t.Helper()
	a, err := agent.New(p.cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan error, 1)
	go func() { p.done <- a.Run(ctx) }()
	p.t.Cleanup(func() {
		cancel()
		if err := <-p.done; err != nil {
			p.t.Logf("agent: %v", err)
		}
	})
}

// readiness returns the /readyz status code and body.
func (p *proxy) readiness() (int, string) {
	p.t.Helper()
	resp, err := http.Get(p.readyz) //nolint:noctx // a test against a local server
	if err != nil {
		p.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatal(err)
	}
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// waitReadiness polls /readyz until it answers code with a body starting with prefix.
func (p *proxy) waitReadiness(code int, prefix string) string {
	p.t.Helper()
	var body string
	waitFor(p.t, "readyz "+prefix, func() bool {
		var got int
		got, body = p.readiness()
		return got == code && strings.HasPrefix(body, prefix)
	})
	return body
}

// waitVersion waits until the store serves version.
func (p *proxy) waitVersion(version string) *resource.Set {
	p.t.Helper()
	waitFor(p.t, "store at version "+version, func() bool {
		cur := p.store.Current()
		return cur != nil && cur.Version() == version
	})
	return p.store.Current()
}

// applier is the store, with an optional veto, recording every set it is asked to apply.
type applier struct {
	store  *store.Store
	mu     sync.Mutex
	veto   func(*resource.Set) error
	offers []*resource.Set
}

func (a *applier) Apply(ctx context.Context, set *resource.Set) error {
	a.mu.Lock()
	a.offers = append(a.offers, set)
	veto := a.veto
	a.mu.Unlock()
	if veto != nil {
		if err := veto(set); err != nil {
			return err
		}
	}
	return a.store.Apply(ctx, set)
}

func (a *applier) setVeto(f func(*resource.Set) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.veto = f
}

// stateLog is the tracker, remembering the state after every event.
type stateLog struct {
	*health.Tracker
	mu     sync.Mutex
	states []health.State
	closed int
	// bootstrapFailures counts failed bootstraps.
	bootstrapFailures int
}

// closes returns how many streams closed or failed to open.
func (s *stateLog) closes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// failedBootstraps returns how many bootstraps failed.
func (s *stateLog) failedBootstraps() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bootstrapFailures
}

func (s *stateLog) record() {
	st := s.Status().State
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states = append(s.states, st)
}

func (s *stateLog) SVIDIssued(t time.Time) { s.Tracker.SVIDIssued(t); s.record() }
func (s *stateLog) BootstrapFailed(err error) {
	s.Tracker.BootstrapFailed(err)
	s.mu.Lock()
	s.bootstrapFailures++
	s.mu.Unlock()
	s.record()
}
func (s *stateLog) StreamOpened() { s.Tracker.StreamOpened(); s.record() }
func (s *stateLog) StreamClosed(err error) {
	s.Tracker.StreamClosed(err)
	s.mu.Lock()
	s.closed++
	s.mu.Unlock()
	s.record()
}
func (s *stateLog) SnapshotApplied(v string) { s.Tracker.SnapshotApplied(v); s.record() }
func (s *stateLog) SnapshotRejected(v string, err error) {
	s.Tracker.SnapshotRejected(v, err)
	s.record()
}
func (s *stateLog) Stopped(err error) { s.Tracker.Stopped(err); s.record() }

// notReadyAfterReady reports whether the proxy ever fell back to NotReady once it had routes.
func (s *stateLog) notReadyAfterReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	seenReady := false
	for _, st := range s.states {
		seenReady = seenReady || st == health.Ready
		if seenReady && st == health.NotReady {
			return true
		}
	}
	return false
}

func stringResource(t *testing.T, key, value string) *discoveryv1.Resource {
	t.Helper()
	r, err := cache.NewResource(key, wrapperspb.String(value))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// contents maps each key of set to its string payload.
func contents(t *testing.T, set *resource.Set) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, p := range set.All() {
		var v wrapperspb.StringValue
		if err := p.UnmarshalTo(&v); err != nil {
			t.Fatal(err)
		}
		out[k] = v.GetValue()
	}
	return out
}

package servingcert

import (
	"context"
	"crypto/x509"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clocktesting "k8s.io/utils/clock/testing"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// fakeCA is a CA source whose CA tests swap.
type fakeCA struct {
	mu      sync.Mutex
	ca      *pki.CA
	changes chan struct{}
}

func newFakeCA(ca *pki.CA) *fakeCA { return &fakeCA{ca: ca, changes: make(chan struct{}, 1)} }

func (f *fakeCA) Current() (*pki.CA, *pki.Bundle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ca == nil {
		return nil, nil, errors.New("no CA")
	}
	return f.ca, pkitest.Bundle(f.ca), nil
}

func (f *fakeCA) Subscribe() <-chan struct{} { return f.changes }

func (f *fakeCA) set(ca *pki.CA) {
	f.mu.Lock()
	f.ca = ca
	f.mu.Unlock()
	f.changes <- struct{}{}
}

const controllerID = "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-controller"

func newManager(t *testing.T, src CASource, clk *clocktesting.FakeClock) *Manager {
	t.Helper()
	m, err := New(Options{
		CA: src, TrustDomain: spiffeid.RequireTrustDomainFromString(wellknown.DefaultTrustDomain),
		Namespace: wellknown.InstallNamespace, Clock: clk, Logger: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func leafOf(t *testing.T, m *Manager) *x509.Certificate {
	t.Helper()
	c, err := m.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}

// Tests that no certificate exists without a CA.
func TestNoCANoCertificate(t *testing.T) {
	t.Parallel()
	m := newManager(t, newFakeCA(nil), clocktesting.NewFakeClock(time.Now()))
	if err := m.Refresh(); err == nil {
		t.Fatal("Refresh without a CA succeeded")
	}
	if _, err := m.Certificate(); err == nil {
		t.Fatal("a certificate exists without a CA")
	}
}

// Tests the certificate's names, lifetime and chain.
func TestIssuedCertificate(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Now())
	ca := pkitest.NewCAAt(t, wellknown.DefaultTrustDomain, clk.Now())
	m := newManager(t, newFakeCA(ca), clk)
	if err := m.Refresh(); err != nil {
		t.Fatal(err)
	}
	leaf := leafOf(t, m)
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != controllerID {
		t.Errorf("URI SANs %v, want [%s]", leaf.URIs, controllerID)
	}
	want := []string{"coxswain-discovery", "coxswain-discovery.coxswain-system", "coxswain-discovery.coxswain-system.svc", "coxswain-discovery.coxswain-system.svc.cluster.local"}
	for _, name := range want {
		if err := leaf.VerifyHostname(name); err != nil {
			t.Errorf("certificate not valid for %s: %v", name, err)
		}
	}
	if life := leaf.NotAfter.Sub(clk.Now()); life > DefaultTTL || life < DefaultTTL-time.Second {
		t.Errorf("certificate lives %s, want %s", life, DefaultTTL)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pkitest.Bundle(ca).Pool(), CurrentTime: clk.Now(), DNSName: want[2]}); err != nil {
		t.Errorf("certificate does not verify against the CA: %v", err)
	}
}

// Tests that Start renews at half-life and at once after a CA change.
func TestRenewal(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Now())
	src := newFakeCA(pkitest.NewCAAt(t, wellknown.DefaultTrustDomain, clk.Now()))
	m := newManager(t, src, clk)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = m.Start(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	first := waitLeaf(t, m, nil)
	if !clk.HasWaiters() {
		waitFor(t, clk.HasWaiters)
	}
	clk.Step(DefaultTTL/2 + time.Minute)
	second := waitLeaf(t, m, first)
	if !second.NotAfter.After(first.NotAfter) {
		t.Fatalf("the renewed certificate expires at %s, not after the first's %s", second.NotAfter, first.NotAfter)
	}

	next := pkitest.NewCAAt(t, wellknown.DefaultTrustDomain, clk.Now())
	src.set(next)
	third := waitLeaf(t, m, second)
	if err := third.CheckSignatureFrom(next.Certificate()); err != nil {
		t.Fatalf("after a CA change the certificate is not from the new CA: %v", err)
	}
}

// waitLeaf polls until the manager holds a certificate other than prev.
func waitLeaf(t *testing.T, m *Manager, prev *x509.Certificate) *x509.Certificate {
	t.Helper()
	var leaf *x509.Certificate
	waitFor(t, func() bool {
		c, err := m.Certificate()
		if err != nil {
			return false
		}
		leaf = c.Leaf
		return prev == nil || !leaf.Equal(prev)
	})
	return leaf
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

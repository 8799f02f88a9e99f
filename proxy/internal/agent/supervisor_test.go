package agent_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coxswain.dev/coxswain/proxy/internal/agent"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

func TestReadinessFollowsTheControlChannel(t *testing.T) {
	t.Parallel()
	c := newController(t)
	c.start()
	p := newProxy(t, c)
	p.run()

	// Subscribed, but the controller has no snapshot for the scope yet.
	body := p.waitReadiness(http.StatusServiceUnavailable, "NotReady: streaming, waiting for a snapshot")
	t.Logf("before the first snapshot: %s", body)

	v1 := c.set(map[string]string{"listener/80": "http", "route/a": "a"})
	serving := p.waitVersion(v1)
	body = p.waitReadiness(http.StatusOK, "Ready: streaming (serving snapshot "+v1)
	t.Logf("streaming: %s", body)

	c.stop()
	body = p.waitReadiness(http.StatusOK, "Degraded: stream closed: ")
	if !strings.Contains(body, "(serving snapshot "+v1) {
		t.Fatalf("Degraded status does not name the serving snapshot: %s", body)
	}
	t.Logf("controller down: %s", body)
	if p.store.Current() != serving {
		t.Fatal("the routing state changed while the controller was down")
	}
	// It keeps retrying while down, and keeps serving.
	_, streamsBefore := c.counts()
	closed := p.states.closes()
	waitFor(t, "failed reconnect attempts", func() bool { return p.states.closes() >= closed+3 })
	if code, body := p.readiness(); code != http.StatusOK || !strings.HasPrefix(body, "Degraded: stream closed: ") {
		t.Fatalf("readyz while retrying: %d %s", code, body)
	}
	if p.store.Current() != serving {
		t.Fatal("the routing state changed while the controller was down")
	}

	c.start() // same ports, a fresh controller with the same routing state
	body = p.waitReadiness(http.StatusOK, "Ready: streaming (serving snapshot "+v1)
	t.Logf("controller back: %s", body)
	if _, streams := c.counts(); streams <= streamsBefore {
		t.Fatalf("no new stream after the restart: %d -> %d", streamsBefore, streams)
	}
	if p.states.notReadyAfterReady() {
		t.Fatal("the proxy went NotReady after it had routes")
	}
}

func TestWireVersionMismatchAtBootstrapStopsRetrying(t *testing.T) {
	t.Parallel()
	c := newController(t)
	c.bootstrapRefusal = anotherRelease
	c.start()
	p := newProxy(t, c)
	p.run()

	err := <-p.done
	p.done <- err // for the cleanup
	if !errors.Is(err, agent.ErrWireVersion) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Run returned %v, want ErrWireVersion from FAILED_PRECONDITION", err)
	}
	if bootstraps, streams := c.counts(); bootstraps != 1 || streams != 0 {
		t.Fatalf("%d bootstrap and %d stream attempts, want exactly one bootstrap", bootstraps, streams)
	}
	code, body := p.readiness()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "NotReady: stopped retrying: wire version mismatch") {
		t.Fatalf("readyz %d %q", code, body)
	}
	t.Logf("readyz: %s", body)
}

func TestWireVersionMismatchOnTheStreamStopsRetryingAndKeepsServing(t *testing.T) {
	t.Parallel()
	c := newController(t)
	v1 := c.set(map[string]string{"route/a": "a"})
	c.start()
	p := newProxy(t, c)
	p.run()
	serving := p.waitVersion(v1)
	p.waitReadiness(http.StatusOK, "Ready")

	// The controller comes back as a release that speaks another wire version.
	c.stop()
	c.streamRefusal = anotherRelease
	_, streamsBefore := c.counts()
	c.start()

	err := <-p.done
	p.done <- err
	if !errors.Is(err, agent.ErrWireVersion) {
		t.Fatalf("Run returned %v, want ErrWireVersion", err)
	}
	if _, streams := c.counts(); streams != streamsBefore+1 {
		t.Fatalf("%d stream attempts after the upgrade, want 1", streams-streamsBefore)
	}
	code, body := p.readiness()
	if code != http.StatusOK || !strings.HasPrefix(body, "Degraded: stopped retrying: wire version mismatch") ||
		!strings.Contains(body, "(serving snapshot "+v1) {
		t.Fatalf("readyz %d %q", code, body)
	}
	t.Logf("readyz: %s", body)
	if p.store.Current() != serving {
		t.Fatal("the routing state changed")
	}
}

func TestRejectedSnapshotIsNackedAndThePreviousSetKeepsServing(t *testing.T) {
	t.Parallel()
	c := newController(t)
	good := c.set(map[string]string{"route/a": "a"})
	c.start()
	p := newProxy(t, c)
	p.applier.setVeto(func(s *resource.Set) error {
		if _, bad := s.Get("route/bad"); bad {
			return errors.New("route/bad: backend has no port")
		}
		return nil
	})
	p.run()
	serving := p.waitVersion(good)

	bad := c.set(map[string]string{"route/a": "a", "route/bad": "x"})
	body := p.waitReadiness(http.StatusOK, fmt.Sprintf("Degraded: snapshot %s rejected: route/bad: backend has no port", bad))
	t.Logf("after the bad snapshot: %s", body)
	waitFor(t, "the NACK at the controller", func() bool {
		return metric(t, c, "coxswain_discovery_snapshot_nacks_total", "") >= 1
	})
	if p.store.Current() != serving {
		t.Fatalf("serving %s after a refused snapshot, want %s", p.store.Current().Version(), good)
	}

	fixed := c.set(map[string]string{"route/a": "a", "route/b": "b"})
	p.waitVersion(fixed)
	p.waitReadiness(http.StatusOK, "Ready: streaming (serving snapshot "+fixed)
}

func TestDeltaIsMergedOverTheAppliedSet(t *testing.T) {
	t.Parallel()
	c := newController(t)
	v1 := c.set(map[string]string{"a": "1", "b": "2", "c": "3"})
	c.start()
	p := newProxy(t, c)
	p.run()
	p.waitVersion(v1)
	p.waitReadiness(http.StatusOK, "Ready")

	v2 := c.set(map[string]string{"a": "1", "b": "2'", "d": "4"})
	got := p.waitVersion(v2)
	if diff := cmp.Diff(map[string]string{"a": "1", "b": "2'", "d": "4"}, contents(t, got)); diff != "" {
		t.Fatalf("merged set (-want +got):\n%s", diff)
	}
	if n := metric(t, c, "coxswain_discovery_snapshots_sent_total", "delta"); n != 1 {
		t.Fatalf("%v deltas sent, want 1: the test did not exercise a delta", n)
	}

	v3 := c.set(map[string]string{"d": "4"})
	got = p.waitVersion(v3)
	if diff := cmp.Diff(map[string]string{"d": "4"}, contents(t, got)); diff != "" {
		t.Fatalf("merged set (-want +got):\n%s", diff)
	}
	if n := metric(t, c, "coxswain_discovery_snapshot_nacks_total", ""); n != 0 {
		t.Fatalf("%v NACKs", n)
	}
}

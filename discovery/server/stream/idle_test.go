package stream

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/servertest"
)

// connEnds counts the connections of a client that ended.
type connEnds struct{ ended atomic.Int32 }

func (c *connEnds) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c *connEnds) HandleRPC(context.Context, stats.RPCStats)                         {}
func (c *connEnds) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c *connEnds) HandleConn(_ context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); ok {
		c.ended.Add(1)
	}
}

// Tests that health checks and refused calls do not keep a stream connection alive: a client
// with a valid SVID that checks health far more often than the idle limit, and opens no stream,
// sees its connection closed.
func TestHealthChecksDoNotKeepAStreamConnectionAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxConnectionIdle = 300 * time.Millisecond })
	ends := &connEnds{}
	conn := servertest.Dial(t, e.addr, e.pki.StreamClientTLS(e.pki.SVID(t, webID)), grpc.WithStatsHandler(ends))
	health, client := healthpb.NewHealthClient(conn), discoveryv1.NewDiscoveryClient(conn)
	deadline := time.Now().Add(5 * time.Second)
	for ends.ended.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("health checks every 50 ms kept the connection open for 5 s past an idle limit of 300 ms")
		}
		_, _ = health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		_, _ = client.Bootstrap(t.Context(), &discoveryv1.BootstrapRequest{})
		time.Sleep(50 * time.Millisecond) // the attacker's pace, not synchronisation
	}
}

// Tests that a live stream keeps its connection past the idle limit.
func TestALiveStreamIsNotIdle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxConnectionIdle = 200 * time.Millisecond })
	ends := &connEnds{}
	conn := servertest.Dial(t, e.addr, e.pki.StreamClientTLS(e.pki.SVID(t, webID)), grpc.WithStatsHandler(ends))
	p := open(t, discoveryv1.NewDiscoveryClient(conn), subscribeMessage("web", webScope))
	p.ack(p.mustRecv())
	time.Sleep(time.Second) // five idle limits with the stream open: the wait is the test
	e.set(t, webScope, map[string]string{"listener": "after a second"})
	expect(t, p.mustRecv(), false, map[string]string{"listener": "after a second"}, nil)
	if n := ends.ended.Load(); n != 0 {
		t.Fatalf("%d connections ended while a stream was live", n)
	}
}

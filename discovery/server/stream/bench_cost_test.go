//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

// dialReady opens n connections to addr, each with its own SVID for id, and waits until every
// one finished its handshake.
func dialReady(t *testing.T, p *servertest.PKI, addr, id string, n int) []*grpc.ClientConn {
	t.Helper()
	conns := make([]*grpc.ClientConn, n)
	for i := range conns {
		conns[i] = servertest.Dial(t, addr, p.StreamClientTLS(p.SVID(t, id)),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(discoveryv1.MaxServerMessageBytes)))
		conns[i].Connect()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, c := range conns {
		for s := c.GetState(); s != connectivity.Ready; s = c.GetState() {
			if !c.WaitForStateChange(ctx, s) {
				t.Fatalf("connection not ready: %s", s)
			}
		}
	}
	return conns
}

// inParallel runs f for every connection at once and fails the test on its first error.
func inParallel(t *testing.T, conns []*grpc.ClientConn, f func(i int, c *grpc.ClientConn) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	for i, c := range conns {
		wg.Go(func() { errs[i] = f(i, c) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// subscribeFull opens a stream, receives the full snapshot, acknowledges it and leaves.
func subscribeFull(ctx context.Context, c *grpc.ClientConn, nodeID string) error {
	stream, err := discoveryv1.NewDiscoveryClient(c).Stream(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(subscribeMessage(nodeID, cache.SharedPool())); err != nil {
		return err
	}
	msg, err := stream.Recv()
	if err != nil {
		return err
	}
	snap := msg.GetSnapshot()
	if !snap.GetFull() || len(snap.GetResources()) != fullSnapshotResources {
		return fmt.Errorf("got a snapshot with full %v and %d resources", snap.GetFull(), len(snap.GetResources()))
	}
	if err := stream.Send(&discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Ack{Ack: &discoveryv1.Ack{
		Version: snap.GetVersion(), Nonce: snap.GetNonce(),
	}}}); err != nil {
		return err
	}
	return leave(stream)
}

// rawFull is subscribeFull against the raw service's method.
func rawFull(ctx context.Context, c *grpc.ClientConn, method string) error {
	stream, err := c.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	hello := []byte("subscribe")
	if err := stream.SendMsg(&hello); err != nil {
		return err
	}
	var got []byte
	if err := stream.RecvMsg(&got); err != nil {
		return err
	}
	if len(got) < fullSnapshotBytes {
		return fmt.Errorf("got %d bytes", len(got))
	}
	ack := []byte("ack")
	if err := stream.SendMsg(&ack); err != nil {
		return err
	}
	return leave(stream)
}

// leave half-closes a stream and waits for the server to end it.
func leave(stream grpc.ClientStream) error {
	if err := stream.CloseSend(); err != nil {
		return err
	}
	var sink []byte
	for {
		var err error
		if s, ok := stream.(discoveryv1.Discovery_StreamClient); ok {
			_, err = s.Recv()
		} else {
			err = stream.RecvMsg(&sink)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// Measures the server's CPU for one 1 MiB full snapshot sent to COXSWAIN_BENCH_STREAMS (100)
// new streams, each on its own warm mTLS connection with its own SVID: the stream server
// (subscribe, authorization, full snapshot, ACK, close) against a bare grpc-go server on the
// same TLS config sending the same bytes (pre-encoded), and a bare grpc-go server marshalling
// the same message for every stream. The servers run in a process of their own; rounds
// alternate, COXSWAIN_BENCH_CPU_ROUNDS (7) of each after one warm-up.
func TestBenchFullSnapshotCPU(t *testing.T) {
	skipUnlessBench(t)
	n := benchInt(t, "COXSWAIN_BENCH_STREAMS", 100)
	rounds := benchInt(t, "COXSWAIN_BENCH_CPU_ROUNDS", 7)
	c := startBenchChild(t, 1)
	ours := dialReady(t, c.pki, c.addr, sharedID, n)
	raw := dialReady(t, c.pki, c.rawAddr, sharedID, n)
	ctx := t.Context()
	variants := []struct {
		name  string
		round func(r int)
	}{
		{"coxswain stream server", func(r int) {
			inParallel(t, ours, func(i int, cc *grpc.ClientConn) error {
				return subscribeFull(ctx, cc, "r"+strconv.Itoa(r)+"-"+strconv.Itoa(i))
			})
		}},
		{"grpc-go, same bytes pre-encoded", func(int) {
			inParallel(t, raw, func(_ int, cc *grpc.ClientConn) error { return rawFull(ctx, cc, "/coxswain.bench.Raw/Bytes") })
		}},
		{"grpc-go, proto marshal per stream", func(int) {
			inParallel(t, raw, func(_ int, cc *grpc.ClientConn) error { return rawFull(ctx, cc, "/coxswain.bench.Raw/Proto") })
		}},
	}
	cpu := make([][]time.Duration, len(variants))
	for r := -1; r < rounds; r++ {
		for i, v := range variants {
			before := c.cpu()
			v.round(r)
			if d := c.cpu() - before; r >= 0 {
				cpu[i] = append(cpu[i], d)
			}
		}
	}
	var ratios []float64
	for r := range rounds {
		ratios = append(ratios, cpu[0][r].Seconds()/cpu[1][r].Seconds())
	}
	slices.Sort(ratios)
	for i, v := range variants {
		m := median(cpu[i])
		t.Logf("%-34s server CPU per round of %d streams: median %s (%s per stream), rounds %v",
			v.name, n, m.Round(time.Microsecond), (m / time.Duration(n)).Round(time.Microsecond), roundAll(cpu[i]))
	}
	ratio := median(cpu[0]).Seconds() / median(cpu[1]).Seconds()
	t.Logf("1 MiB full snapshot to %d streams: coxswain / grpc-go pre-encoded = %.2f (median of per-round ratios %.2f; target <= 1.2: %s); coxswain / grpc-go marshalling per stream = %.2f",
		n, ratio, ratios[len(ratios)/2], verdict(ratio <= 1.2), median(cpu[0]).Seconds()/median(cpu[2]).Seconds())
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// Measures the server process's memory while COXSWAIN_BENCH_IDLE (10000) discovery clients, each
// on its own mTLS connection with its own SVID, hold an idle stream after their first snapshot:
// 25 proxies (the replicas of one Deployment, under the per-identity cap of 32) for each of
// idle/25 Gateways of 10 routes. Reports the heap and stacks after a collection, and the
// resident set, at 1,000 streams and at all of them.
func TestBenchIdleStreamMemory(t *testing.T) {
	skipUnlessBench(t)
	total := benchInt(t, "COXSWAIN_BENCH_IDLE", 10000)
	gateways := (total + 24) / 25
	c := startBenchChild(t, gateways)
	base := c.memory()
	t.Logf("server process with %d Gateways and a 1 MiB shared-pool snapshot, no stream: heap %s, stacks %s, resident %s",
		gateways, mib(base.heap), mib(base.stack), mib(base.rss))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var first atomic.Int64
	controller := spiffeid.RequireFromString(servertest.ControllerID)
	connected := 0
	for _, checkpoint := range slices.Compact([]int{min(1000, total), total}) {
		for connected < checkpoint {
			batch := min(connected+100, checkpoint)
			for i := connected; i < batch; i++ {
				g := i % gateways
				cfg := client.StreamConfig{
					Address: "passthrough:///" + c.addr, NodeID: "proxy-" + strconv.Itoa(i), Scope: gatewayScope(g).Proto(),
					TLS: client.StreamTLS(tlsconfig.NewRotatingCertificate(c.pki.SVID(t, gatewayID(g))), c.pki.Bundle, controller),
				}
				wg.Go(func() {
					seen := false
					err := client.Run(ctx, cfg, func(context.Context, *discoveryv1.Snapshot) error {
						if !seen {
							seen = true
							first.Add(1)
						}
						return nil
					})
					if ctx.Err() == nil {
						t.Errorf("proxy %s: %v", cfg.NodeID, err)
					}
				})
			}
			connected = batch
			pollFor(t, "a batch of proxies to get their first snapshot", 2*time.Minute, func() bool { return first.Load() == int64(connected) })
		}
		m := c.memory()
		per := func(now, before uint64) string {
			return strconv.FormatFloat(float64(int64(now)-int64(before))/float64(m.live)/1024, 'f', 1, 64) + " KiB"
		}
		t.Logf("%d idle streams: heap %s, stacks %s, resident %s; per stream: heap %s, stacks %s, heap+stacks %s, resident %s",
			m.live, mib(m.heap), mib(m.stack), mib(m.rss), per(m.heap, base.heap), per(m.stack, base.stack),
			per(m.heap+m.stack, base.heap+base.stack), per(m.rss, base.rss))
	}
}

func mib(b uint64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB" }

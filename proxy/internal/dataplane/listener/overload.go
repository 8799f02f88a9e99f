package listener

import (
	"context"
	"math"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync/atomic"
	"time"
)

// overloadInterval is how often the overload manager reads the runtime's memory.
const overloadInterval = 100 * time.Millisecond

// DefaultWatermarkPercent is the share of GOMEMLIMIT the watermark defaults to.
const DefaultWatermarkPercent = 90

// Overload is the proxy's overload manager: it reads the memory the runtime holds for live
// objects and goroutine stacks every 100 ms and, while it is above the watermark, says the
// proxy is overloaded. The listeners then close new connections on accept and drop the
// datagrams that would open new UDP flows, and the handler answers new requests 503 with
// Connection: close, so that an overloaded proxy sheds load
// instead of growing until it is killed. The live heap is the one measured by the last
// collection, which runs more often as memory nears GOMEMLIMIT; a burst of garbage between
// collections does not count. A nil *Overload is never overloaded.
type Overload struct {
	watermark uint64
	over      atomic.Bool
	samples   []rtmetrics.Sample
	count     func(kind string)
}

// Kinds of what the overload manager refuses, as its metric labels them.
const (
	// OverloadConnection is a connection closed on accept.
	OverloadConnection = "connection"
	// OverloadUDPFlow is a UDP flow not opened: the datagram that would have opened it is
	// dropped.
	OverloadUDPFlow = "udp_flow"
)

// NewOverload returns an overload manager with the watermark, or nil when it is zero.
// refused, when set, counts every connection closed on accept (kind OverloadConnection) and
// every UDP flow not opened (OverloadUDPFlow) while overloaded.
func NewOverload(watermark uint64, refused func(kind string)) *Overload {
	if watermark == 0 {
		return nil
	}
	if refused == nil {
		refused = func(string) {}
	}
	return &Overload{watermark: watermark, count: refused, samples: []rtmetrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"},
	}}
}

// DefaultWatermark is DefaultWatermarkPercent of the runtime's memory limit (GOMEMLIMIT), or
// zero (no watermark) when no limit is set.
func DefaultWatermark() uint64 {
	limit := debug.SetMemoryLimit(-1)
	if limit <= 0 || limit == math.MaxInt64 {
		return 0
	}
	return uint64(limit) / 100 * DefaultWatermarkPercent
}

// Run samples memory until ctx ends.
func (o *Overload) Run(ctx context.Context) {
	if o == nil {
		return
	}
	t := time.NewTicker(overloadInterval)
	defer t.Stop()
	for {
		o.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (o *Overload) sample() {
	rtmetrics.Read(o.samples)
	var used uint64
	for _, s := range o.samples {
		if s.Value.Kind() == rtmetrics.KindUint64 {
			used += s.Value.Uint64()
		}
	}
	o.over.Store(used > o.watermark)
}

// refused counts a connection closed on accept while overloaded.
func (o *Overload) refused() { o.count(OverloadConnection) }

// refusedUDPFlow counts a UDP flow not opened while overloaded.
func (o *Overload) refusedUDPFlow() { o.count(OverloadUDPFlow) }

// Overloaded reports whether memory was above the watermark at the last sample.
func (o *Overload) Overloaded() bool { return o != nil && o.over.Load() }

// Gauge is Overloaded as 1 or 0, for the metrics.
func (o *Overload) Gauge() float64 {
	if o.Overloaded() {
		return 1
	}
	return 0
}

package forward

import (
	"github.com/valyala/fasthttp"

	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

// mirror sends a copy of the request, as it will be forwarded, to each sampled mirror cluster.
// The copy is taken now; the exchange runs on its own goroutine and its reply is dropped, so
// the main request never waits for it. When MirrorConcurrency copies are in flight, more are
// dropped and counted.
func (h *Handler) mirror(x *exchange) {
	for _, m := range x.route.Mirrors {
		if !m.Sample(h.opts.Rand()) {
			continue
		}
		ep := x.state.Upstreams.Cluster(m.Cluster.Index).Next()
		if ep == nil {
			continue
		}
		select {
		case h.mirrorSlots <- struct{}{}:
		default:
			h.opts.Metrics.MirrorDropped()
			continue
		}
		req := fasthttp.AcquireRequest()
		x.ctx.Request.CopyTo(req)
		req.UseHostHeader = true
		h.background.Add(1)
		go h.sendMirror(ep, req)
	}
}

func (h *Handler) sendMirror(ep *upstream.Endpoint, req *fasthttp.Request) {
	defer h.background.Done()
	defer func() { <-h.mirrorSlots }()
	resp := fasthttp.AcquireResponse()
	resp.SkipBody = true
	_ = ep.HTTP1.DoTimeout(req, resp, h.opts.MirrorTimeout)
	fasthttp.ReleaseRequest(req)
	fasthttp.ReleaseResponse(resp)
}

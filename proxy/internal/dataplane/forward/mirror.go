package forward

import (
	"bytes"
	"context"
	"io"
	"net/http"

	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

// maxMirrorDrain is how much of a mirror's response is read, to let its connection be reused;
// a longer response closes the connection instead.
const maxMirrorDrain = 64 << 10

// mirror sends a copy of the request, as it will be forwarded, to each sampled mirror cluster,
// on its own goroutine; the main request never waits for it. A request body is copied only
// when it is known and at most MaxMirrorBodySize: it is then read whole first, and the main
// exchange sends it from memory. When MirrorConcurrency copies are in flight, or the body is
// too large to copy, the copy is dropped and counted. The error is the client's, reading the
// body.
func (h *Handler) mirror(x *exchange, out *http.Request, body *requestBody) error {
	var bodyRead bool
	for _, m := range x.route.Mirrors {
		if !m.Sample(h.opts.Rand()) {
			continue
		}
		cl := x.state.Upstreams.Cluster(m.Cluster.Index)
		ep := cl.Next()
		if ep == nil {
			continue
		}
		if body != nil && !bodyRead {
			ok, overBudget, err := body.buffer(h.opts.MaxMirrorBodySize)
			if err != nil {
				return err
			}
			if !ok {
				if overBudget {
					h.opts.Metrics.BodyBufferRefused("mirror")
				}
				h.opts.Metrics.MirrorDropped()
				return nil
			}
			bodyRead = true
		}
		h.startMirror(x, out, cl, ep, body)
	}
	return nil
}

// startMirror sends one mirror copy to ep in the background when a mirror slot and a place
// on the endpoint are free at once; otherwise the copy is dropped and counted.
func (h *Handler) startMirror(x *exchange, out *http.Request, cl *upstream.Cluster, ep *upstream.Endpoint, body *requestBody) {
	select {
	case h.mirrorSlots <- struct{}{}:
	default:
		h.opts.Metrics.MirrorDropped()
		return
	}
	place, ok := ep.TryAcquire(clientOf(x.r))
	if !ok {
		<-h.mirrorSlots
		h.opts.Metrics.MirrorDropped()
		return
	}
	if !h.track() {
		place.Release()
		<-h.mirrorSlots
		return
	}
	req := mirrorRequest(out, ep, body)
	req.URL.Scheme = cl.Scheme()
	if body != nil {
		body.hold()
	}
	go func() {
		defer h.background.Done()
		defer func() { <-h.mirrorSlots }()
		defer place.Release()
		if body != nil {
			defer body.unref()
		}
		h.sendMirror(cl.Transport(ep), req)
	}()
}

// mirrorRequest copies out for ep, with the body read so far, on a context of its own.
func mirrorRequest(out *http.Request, ep *upstream.Endpoint, body *requestBody) *http.Request {
	req := &http.Request{
		Method: out.Method, Proto: out.Proto, ProtoMajor: 1, ProtoMinor: 1,
		Header: out.Header.Clone(), Host: out.Host,
	}
	// A mirror copy never asks to switch protocols.
	delete(req.Header, headerConnection)
	delete(req.Header, headerUpgrade)
	u := *out.URL
	u.Host = ep.Address
	req.URL = &u
	if body != nil && body.whole != nil {
		req.Body = io.NopCloser(bytes.NewReader(body.whole))
		req.ContentLength = int64(len(body.whole))
	}
	return req
}

// sendMirror runs one mirror exchange and reads its response to the end, or closes its
// connection, so that nothing of it is left for the next request on that connection.
// A 101 (which a mirror copy never asks for) is closed at once. The exchange ends at
// MirrorTimeout, or when the data plane's drain runs out.
func (h *Handler) sendMirror(t http.RoundTripper, req *http.Request) {
	ctx, cancel := context.WithTimeout(h.stopCtx, h.opts.MirrorTimeout)
	defer cancel()
	resp, err := t.RoundTrip(req.WithContext(ctx))
	if err != nil {
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxMirrorDrain))
	}
	_ = resp.Body.Close()
}

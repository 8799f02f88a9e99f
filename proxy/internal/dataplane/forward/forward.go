package forward

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

// errRetry cancels an attempt the HTTP engine would make again after the request, or part of
// it, was written: a backend may have acted on it, so it is not sent twice.
var errRetry = errors.New("request was written once; not retried")

// forward sends the request to the route's backend and relays the answer; it returns the
// status the client gets.
func (h *Handler) forward(x *exchange) int {
	r := x.route
	if x.r.Context().Err() != nil { // reset before it was forwarded
		x.reason = reasonClientClosed
		return statusClientClosed
	}
	if !announcedTrailers(x.r, r) {
		return x.refuse(http.StatusBadRequest, reasonManagedTrailer)
	}
	b := r.Pick(h.opts.Rand())
	switch {
	case b == nil:
		return x.failBackend(http.StatusInternalServerError)
	case b.ErrorStatus != 0:
		return x.failBackend(b.ErrorStatus)
	}
	cl := x.state.Upstreams.Cluster(b.Cluster.Index)
	if cl.FailClosed {
		h.opts.Metrics.UpstreamError(cl.Name, "tls_policy")
		return x.refuse(http.StatusServiceUnavailable, reasonBackendTLSPolicy)
	}
	ep := cl.Next()
	if ep == nil {
		h.opts.Metrics.UpstreamError(cl.Name, "no_endpoints")
		return x.refuse(http.StatusServiceUnavailable, reasonNoEndpoints)
	}
	x.upstream = ep.Address
	cl.Budget.Begin()
	defer cl.Budget.End()
	upgrade := !cl.H2C && !cl.H2 && isWebSocket(x.r)
	body := x.requestBody()
	x.body = body
	policy := x.retryPolicy(body, upgrade)
	var replay []byte
	if body != nil {
		defer body.unref()
	}
	if policy != nil && body != nil {
		ok, overBudget, err := body.buffer(h.opts.MaxRetryBodySize)
		switch {
		case err != nil:
			return x.bodyFailed(err)
		case ok:
			replay = body.whole
		default:
			if overBudget {
				h.opts.Metrics.BodyBufferRefused("retry")
			}
			policy = nil
		}
	}
	held := false // a retry of the budget is taken for the attempt in flight
	defer func() {
		if held {
			cl.Budget.Release()
		}
	}()
	for retries := 0; ; retries++ {
		ctx, cancel := context.WithCancelCause(x.r.Context())
		defer cancel(nil)
		if d := deadline(x.start, r); !d.IsZero() {
			var stop context.CancelFunc
			ctx, stop = context.WithDeadline(ctx, d)
			defer stop()
		}
		x.retries = retries
		var wrote, reused atomic.Bool
		stale := staleRetry(x.r.Method, upgrade, body == nil || replay != nil)
		trace := &httptrace.ClientTrace{
			GetConn: func(string) {
				if wrote.Load() {
					// The engine goes again: allowed once, for a request that may be sent
					// twice, when its reused connection ended before any byte of an answer.
					if !stale || !reused.Load() {
						cancel(errRetry)
					} else {
						stale = false
						reused.Store(false)
						wrote.Store(false)
						h.opts.Metrics.Retry(cl.Name, RetryStaleConnection)
					}
				}
				if h.opts.AccessLog != nil {
					x.connectAt.Store(int64(time.Since(x.start)))
				}
			},
			GotConn: func(info httptrace.GotConnInfo) {
				reused.Store(info.Reused)
				if h.opts.AccessLog != nil {
					x.gotConn(info)
				}
			},
			WroteHeaders:   func() { wrote.Store(true) },
			Got1xxResponse: x.informational,
		}
		traced := httptrace.WithClientTrace(ctx, trace)
		out := x.outbound(traced, ep, body, upgrade)
		out.URL.Scheme = cl.Scheme()
		if replay != nil {
			// Each attempt sends the buffered body afresh; the engine may still be reading an
			// earlier attempt's reader, and reads it again through GetBody when it retries.
			out.Body = io.NopCloser(bytes.NewReader(replay))
			out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(replay)), nil }
		}
		if retries == 0 && !upgrade { // an upgrade is never mirrored: its copy would open a tunnel
			if err := h.mirror(x, out, body); err != nil {
				return x.bodyFailed(err)
			}
		}
		if stale { // after the mirrors copied the request, whose copies are never sent twice
			markIdempotent(out.Header, out.Method)
		}
		if b.Filters != nil { // after the mirrors copied the request
			backendRequestHeaders(out.Header, b.Filters, upgrade)
			x.backendRewrite(out, b.Filters.Rewrite)
		}
		slot, status := h.admit(ctx, x, cl, ep)
		if status != 0 {
			return status
		}
		resp, err := cl.Transport(ep).RoundTrip(out)
		if err == nil {
			x.upstreamStatus, x.firstByte = resp.StatusCode, time.Since(x.start)
		}
		if held {
			cl.Budget.Release()
			held = false
		}
		if policy != nil && retries < policy.Attempts && x.retriable(ctx, resp, err, policy) {
			if wait, ok := x.backoff(policy, retries); ok {
				if !cl.Budget.Acquire(err != nil && isDial(err)) {
					h.opts.Metrics.Retry(cl.Name, "budget_exhausted")
				} else {
					held = true
					h.opts.Metrics.Retry(cl.Name, "sent")
					if x.span != nil {
						x.retryEvent(retries+1, resp, err)
					}
					if resp != nil {
						discard(resp)
					}
					slot.Release()
					cancel(nil)
					if !x.sleep(wait) {
						x.reason = reasonClientClosed
						return statusClientClosed
					}
					if ep = cl.Next(); ep == nil {
						h.opts.Metrics.UpstreamError(cl.Name, "no_endpoints")
						return x.refuse(http.StatusServiceUnavailable, reasonNoEndpoints)
					}
					x.upstream = ep.Address
					continue
				}
			}
		}
		if err != nil {
			slot.Release()
			return h.upstreamFailed(ctx, x, cl, body, err)
		}
		if upgrade && resp.StatusCode == http.StatusSwitchingProtocols {
			resp.Body = holdSlot(resp.Body, slot)
			return h.tunnel(x, b, resp) // the tunnel owns the connection, and its place, now
		}
		defer slot.Release()
		defer func() { _ = resp.Body.Close() }()
		if body != nil && !body.done.Load() && x.r.ProtoMajor == 1 {
			// The backend answered before the body ended: the rest of it is still on the
			// connection, which is not read for another request.
			x.closeConn = true
		}
		return x.relay(resp, b, cancel)
	}
}

// gotConn records how long the attempt took to get a connection to the backend.
func (x *exchange) gotConn(httptrace.GotConnInfo) {
	x.connect.Store(int64(time.Since(x.start)) - x.connectAt.Load())
}

// Reasons of the requests refused for the endpoint's limits.
const (
	reasonPendingOverflow = "upstream_pending_overflow"
	reasonPendingTimeout  = "upstream_pending_timeout"
	reasonClientShare     = "upstream_client_share"
)

// admit takes a place on ep for the attempt, or answers 503 when the endpoint's limits refuse
// it: too many requests waiting, a wait too long, or a client holding its share of the
// endpoint already. It returns the status given when it refused.
func (h *Handler) admit(ctx context.Context, x *exchange, cl *upstream.Cluster, ep *upstream.Endpoint) (upstream.Slot, int) {
	slot, err := ep.Acquire(ctx, clientOf(x.r))
	if err == nil {
		return slot, 0
	}
	var reason, metric string
	switch {
	case errors.Is(err, upstream.ErrPendingOverflow):
		reason, metric = reasonPendingOverflow, "pending_overflow"
	case errors.Is(err, upstream.ErrPendingTimeout):
		reason, metric = reasonPendingTimeout, "pending_timeout"
	case errors.Is(err, upstream.ErrClientShare):
		reason, metric = reasonClientShare, "client_share"
	case x.r.Context().Err() != nil:
		x.reason = reasonClientClosed
		return slot, statusClientClosed
	default: // the route's timeout passed while waiting
		h.opts.Metrics.UpstreamError(cl.Name, "timeout")
		return slot, x.refuse(http.StatusGatewayTimeout, reasonTimeout)
	}
	h.opts.Metrics.UpstreamError(cl.Name, metric)
	return slot, x.refuse(http.StatusServiceUnavailable, reason)
}

// clientOf is the client an endpoint's share is counted for: the request's source address.
func clientOf(r *http.Request) string {
	host, _, err := splitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// slotBody is a tunnel's upstream connection, which gives the endpoint's place back once
// closed.
type slotBody struct {
	io.ReadWriteCloser
	slot upstream.Slot
}

// CloseWrite half-closes the connection when it can, else closes it.
func (b *slotBody) CloseWrite() error {
	if cw, ok := b.ReadWriteCloser.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return b.Close()
}

func (b *slotBody) Close() error {
	err := b.ReadWriteCloser.Close()
	b.slot.Release()
	return err
}

// holdSlot ties slot to the upgraded connection body; a body that is not a connection is left
// as it is (the tunnel refuses it) and the slot given back.
func holdSlot(body io.ReadCloser, slot upstream.Slot) io.ReadCloser {
	rwc, ok := body.(io.ReadWriteCloser)
	if !ok {
		slot.Release()
		return body
	}
	return &slotBody{ReadWriteCloser: rwc, slot: slot}
}

// deadline is the earlier of the route's request and backend deadlines, zero when the route
// sets neither.
func deadline(start time.Time, r *router.Route) time.Time {
	var d time.Time
	if r.RequestTimeout > 0 {
		d = start.Add(r.RequestTimeout)
	}
	if r.BackendTimeout > 0 {
		if b := time.Now().Add(r.BackendTimeout); d.IsZero() || b.Before(d) {
			d = b
		}
	}
	return d
}

// outbound builds the upstream request from validated parts: the method, the normalized and
// rewritten target, the Host, the end-to-end headers after the route's filters, the forwarding
// headers, and the body with the framing the client's request had. Nothing the client sent
// about framing or the connection reaches the backend.
func (x *exchange) outbound(ctx context.Context, ep *upstream.Endpoint, body *requestBody, upgrade bool) *http.Request {
	in := x.r
	hdr := make(http.Header, len(in.Header)+3)
	copyEndToEnd(hdr, in.Header)
	if httpHasTrailersTE(in.Header) {
		hdr[headerTE] = []string{"trailers"}
	}
	if _, ok := hdr["User-Agent"]; !ok {
		hdr["User-Agent"] = nil // the engine adds its own when the field is absent
	}
	if name := x.h.opts.RequestIDHeader; name != "" {
		// Before the route's filters, which may still set or remove it.
		if x.requestIDValues != nil {
			hdr[name] = x.requestIDValues
		} else {
			hdr[name] = []string{x.requestID}
		}
	}
	if x.span != nil {
		// Before the route's filters too: the backend's parent is the proxy's span.
		x.h.opts.Tracer.Inject(x.span, hdr)
	}
	r := x.route
	for _, m := range r.RequestHeaders {
		modifyHeaders(hdr, m)
	}
	host, path := in.Host, x.path
	if rw := r.Rewrite; rw != nil {
		if rw.Path != nil {
			path = escapePath(rw.Path.ReplacePath(r, x.path))
		}
		if rw.Hostname != "" {
			host = rw.Hostname
		}
	}
	setForwarding(hdr, in.RemoteAddr, in.Host, x.listener)
	if upgrade {
		hdr[headerConnection] = []string{"Upgrade"}
		hdr[headerUpgrade] = in.Header[headerUpgrade]
	}
	out := &http.Request{
		Method:     in.Method,
		URL:        &url.URL{Scheme: "http", Host: ep.Address, Opaque: path, RawQuery: in.URL.RawQuery},
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     hdr,
		Host:       host,
	}
	if body != nil {
		out.Body = body
		out.ContentLength = in.ContentLength
		if len(in.Trailer) > 0 {
			out.Trailer = in.Trailer
			out.ContentLength = -1 // trailers need chunked framing
		}
	}
	return out.WithContext(ctx)
}

// backendRequestHeaders applies the chosen backend's request header modifiers, after the
// route's, leaving the fields the proxy sets itself as the route's modifiers leave them.
func backendRequestHeaders(hdr http.Header, f *router.BackendFilters, upgrade bool) {
	var fwd [len(forwardingFields)][]string
	for i, name := range forwardingFields {
		fwd[i] = hdr[name]
	}
	conn, up := hdr[headerConnection], hdr[headerUpgrade]
	for _, m := range f.RequestHeaders {
		modifyHeaders(hdr, m)
	}
	for i, name := range forwardingFields {
		hdr[name] = fwd[i]
	}
	if upgrade {
		hdr[headerConnection], hdr[headerUpgrade] = conn, up
	}
}

// backendRewrite applies the chosen backend's rewrite to out, which every attempt builds
// afresh, so a retry sends the same rewritten request to the next endpoint. The path is
// replaced from the request's own, as the route matched it (a route with a backend's rewrite
// has none of its own); the query is kept; the Host changes when the rewrite names one.
func (x *exchange) backendRewrite(out *http.Request, rw *router.Rewrite) {
	if rw == nil {
		return
	}
	if rw.Path != nil {
		out.URL.Opaque = escapePath(rw.Path.ReplacePath(x.route, x.path))
	}
	if rw.Hostname != "" {
		out.Host = rw.Hostname
	}
}

func httpHasTrailersTE(h http.Header) bool {
	return httpguts.HeaderValuesContainsToken(h[headerTE], "trailers")
}

// upstreamFailed answers a failed exchange, telling the client's faults from the backend's:
// 413 or 408 or 400 for the request body, nothing for a client that left, 504 for a timeout,
// 502 otherwise.
func (h *Handler) upstreamFailed(ctx context.Context, x *exchange, cl *upstream.Cluster, body *requestBody, err error) int {
	if body != nil && body.failed() != nil {
		return x.bodyFailed(body.failed())
	}
	if x.r.Context().Err() != nil {
		x.reason = reasonClientClosed
		return statusClientClosed
	}
	switch {
	case errors.Is(context.Cause(ctx), errRetry):
		h.opts.Metrics.UpstreamError(cl.Name, "reset")
		return x.refuse(http.StatusBadGateway, reasonUpstreamReset)
	case isTLS(err):
		h.opts.Metrics.UpstreamError(cl.Name, "tls")
		return x.refuse(http.StatusBadGateway, reasonUpstreamTLS)
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		h.opts.Metrics.UpstreamError(cl.Name, "timeout")
		return x.refuse(http.StatusGatewayTimeout, reasonTimeout)
	case isDial(err):
		h.opts.Metrics.UpstreamError(cl.Name, "connect")
		return x.refuse(http.StatusBadGateway, reasonConnect)
	}
	h.opts.Metrics.UpstreamError(cl.Name, "protocol")
	return x.refuse(http.StatusBadGateway, reasonUpstreamError)
}

// bodyFailed answers a request whose body could not be read from the client.
func (x *exchange) bodyFailed(err error) int {
	switch {
	case errors.Is(err, errBodyTooLarge):
		return x.refuse(http.StatusRequestEntityTooLarge, reasonBodyTooLarge)
	case isTimeout(err):
		// Checked before the client's context, which the engine cancels on any read error.
		return x.refuse(http.StatusRequestTimeout, reasonBodyTimeout)
	case x.r.Context().Err() != nil:
		x.reason = reasonClientClosed
		return statusClientClosed
	}
	return x.refuse(http.StatusBadRequest, reasonClientBody)
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// isTLS reports a failed TLS handshake with a backend: a certificate that does not verify, a
// peer that does not speak TLS, or a TLS alert.
func isTLS(err error) bool {
	var (
		verify *tls.CertificateVerificationError
		record tls.RecordHeaderError
		alert  tls.AlertError
	)
	return errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &alert)
}

func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func splitHostPort(addr string) (string, string, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return net.SplitHostPort(addr)
	}
	return ap.Addr().Unmap().WithZone("").String(), "", nil
}

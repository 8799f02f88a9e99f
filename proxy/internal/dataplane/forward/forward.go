package forward

import (
	"bytes"
	"errors"
	"net/netip"
	"time"

	"github.com/valyala/fasthttp"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

// Header names the forwarder sets or strips.
const (
	headerXForwardedFor   = "X-Forwarded-For"
	headerXForwardedProto = "X-Forwarded-Proto"
	headerKeepAlive       = "Keep-Alive"
	headerProxyConnection = "Proxy-Connection"
	headerTE              = "Te"
)

// forward sends the request to the route's backend and returns the status the client gets.
func (h *Handler) forward(x *exchange) int {
	r := x.route
	upgrade := isWebSocket(&x.ctx.Request.Header)
	x.modifyRequest(upgrade)
	h.mirror(x)
	b := r.Pick(h.opts.Rand())
	switch {
	case b == nil:
		return x.fail(fasthttp.StatusInternalServerError)
	case b.ErrorStatus != 0:
		return x.fail(b.ErrorStatus)
	}
	cl := x.state.Upstreams.Cluster(b.Cluster.Index)
	ep := cl.Next()
	if ep == nil {
		h.opts.Metrics.UpstreamError(cl.Name, "no_endpoints")
		return x.fail(fasthttp.StatusServiceUnavailable)
	}
	x.upstream = ep.Address
	deadline := deadline(x.ctx.Time(), r)
	switch {
	case upgrade:
		return h.tunnel(x, ep)
	case cl.H2C:
		return h.exchangeH2C(x, cl, ep, deadline)
	}
	return h.exchangeHTTP1(x, cl, ep, deadline)
}

// deadline is the earlier of the route's request and backend deadlines, zero when the route
// sets neither: the upstream pool's watchdog then bounds the wait for a response, without a
// timer per request.
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

func (h *Handler) exchangeHTTP1(x *exchange, cl *upstream.Cluster, ep *upstream.Endpoint, deadline time.Time) int {
	req, resp := &x.ctx.Request, &x.ctx.Response
	var err error
	if deadline.IsZero() {
		err = ep.HTTP1.Do(req, resp)
	} else {
		err = ep.HTTP1.DoDeadline(req, resp, deadline)
	}
	if err != nil {
		return h.upstreamFailed(x, cl, err)
	}
	return x.modifyResponse()
}

// upstreamFailed answers a failed exchange: 504 for a timeout, 503 when no connection was
// free, 502 otherwise.
func (h *Handler) upstreamFailed(x *exchange, cl *upstream.Cluster, err error) int {
	switch {
	case errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrDialTimeout) || isTimeout(err):
		h.opts.Metrics.UpstreamError(cl.Name, "timeout")
		return x.fail(fasthttp.StatusGatewayTimeout)
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		h.opts.Metrics.UpstreamError(cl.Name, "overload")
		return x.fail(fasthttp.StatusServiceUnavailable)
	}
	h.opts.Metrics.UpstreamError(cl.Name, "connect")
	return x.fail(fasthttp.StatusBadGateway)
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// modifyRequest applies the route's request filters and the forwarding headers, and strips
// hop-by-hop headers (keeping Connection and Upgrade for a WebSocket upgrade).
func (x *exchange) modifyRequest(upgrade bool) {
	req := &x.ctx.Request
	r := x.route
	for _, m := range r.RequestHeaders {
		modifyHeaders(&req.Header, m)
	}
	if rw := r.Rewrite; rw != nil {
		if rw.Path != nil {
			req.URI().SetPath(rw.Path.ReplacePath(r, x.path))
		}
		if rw.Hostname != "" {
			req.Header.SetHost(rw.Hostname)
		}
	}
	req.UseHostHeader = true
	if x.listener.Scheme != "http" {
		// Upstream connections are plain: the client refuses a URI scheme that differs.
		req.URI().SetScheme("http")
	}
	req.Header.ResetConnectionClose()
	if !req.Header.IsHTTP11() {
		req.Header.SetProtocolBytes(protocolHTTP11)
	}
	x.forwardingHeaders(upgrade)
}

var protocolHTTP11 = []byte("HTTP/1.1")

// Headers found by the single scan of forwardingHeaders.
const (
	sawHopByHop = 1 << iota
	sawUpgrade
	sawXForwardedFor
	sawXForwardedProto
)

// forwardingHeaders strips hop-by-hop headers (keeping Connection and Upgrade for a WebSocket
// upgrade), appends the client address to X-Forwarded-For and sets X-Forwarded-Proto. The
// common request has none of these headers and is only appended to.
func (x *exchange) forwardingHeaders(upgrade bool) {
	hdr := &x.ctx.Request.Header
	saw := x.sawHeaders()
	var buf [96]byte
	b := buf[:0]
	if saw&sawXForwardedFor != 0 {
		if prior := hdr.Peek(headerXForwardedFor); len(prior) > 0 {
			b = append(append(b, prior...), ',', ' ')
		}
	}
	if saw&sawUpgrade != 0 && !upgrade {
		hdr.Del(fasthttp.HeaderConnection)
		hdr.Del(fasthttp.HeaderUpgrade)
	}
	if saw&sawHopByHop != 0 {
		del(hdr, headerKeepAlive)
		del(hdr, headerProxyConnection)
		del(hdr, headerTE)
	}
	if x.clientIP != nil {
		b = append(b, x.clientIP...)
	} else if ip, ok := netip.AddrFromSlice(x.ctx.RemoteIP()); ok {
		b = ip.Unmap().AppendTo(b)
	}
	if saw&sawXForwardedFor != 0 {
		hdr.SetBytesV(headerXForwardedFor, b)
	} else {
		hdr.AddBytesV(headerXForwardedFor, b)
	}
	if saw&sawXForwardedProto != 0 {
		hdr.Set(headerXForwardedProto, x.listener.Scheme)
	} else {
		hdr.Add(headerXForwardedProto, x.listener.Scheme)
	}
}

// modifyResponse makes the upstream response the client's: the client connection's keep-alive
// is the server's business, and the route's response filters apply.
func (x *exchange) modifyResponse() int {
	resp := &x.ctx.Response
	resp.Header.ResetConnectionClose()
	del(&resp.Header, fasthttp.HeaderConnection)
	del(&resp.Header, headerKeepAlive)
	for _, m := range x.route.ResponseHeaders {
		modifyHeaders(&resp.Header, m)
	}
	return resp.StatusCode()
}

// headers is what RequestHeader and ResponseHeader share.
type headers interface {
	Set(key, value string)
	Add(key, value string)
	Del(key string)
	Peek(key string) []byte
}

// modifyHeaders applies a header modifier. Names in set, add and remove are distinct, so the
// removals run first: fasthttp deletes by moving the last header into the hole, and removing
// before appending keeps the added values after the values the request brought.
func modifyHeaders(h headers, m *router.HeaderModifier) {
	for _, name := range m.Remove {
		del(h, name)
	}
	for _, hd := range m.Set {
		h.Set(hd.Name, hd.Value)
	}
	for _, hd := range m.Add {
		h.Add(hd.Name, hd.Value)
	}
}

// del deletes a header when it is present; the common case, absent, changes nothing.
func del(h headers, name string) {
	if h.Peek(name) != nil {
		h.Del(name)
	}
}

// isWebSocket says whether the request asks to upgrade to WebSocket.
func isWebSocket(h *fasthttp.RequestHeader) bool {
	if !h.ConnectionUpgrade() {
		return false
	}
	v := h.Peek(fasthttp.HeaderUpgrade)
	return len(v) == len("websocket") && equalFold(v, "websocket")
}

func equalFold(b []byte, s string) bool {
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// sawHeaders says which of the headers forwardingHeaders handles the request has. It scans
// the header block as received, one pass without the cookie parsing and copies of fasthttp's
// header iteration; when the request was built rather than parsed (HTTP/2), or a filter may
// have changed its headers, it looks each one up instead.
func (x *exchange) sawHeaders() int {
	hdr := &x.ctx.Request.Header
	raw := hdr.RawHeaders()
	if len(raw) == 0 || len(x.route.RequestHeaders) > 0 {
		return peekHeaders(hdr)
	}
	saw := 0
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if colon := bytes.IndexByte(line, ':'); colon > 0 {
			saw |= headerFlag(line[:colon])
		}
	}
	return saw
}

// headerFlag classifies a header name, compared case-insensitively.
func headerFlag(name []byte) int {
	switch len(name) {
	case len(fasthttp.HeaderConnection): // also Keep-Alive
		if bytes.EqualFold(name, []byte(fasthttp.HeaderConnection)) {
			return sawUpgrade
		}
		if bytes.EqualFold(name, []byte(headerKeepAlive)) {
			return sawHopByHop
		}
	case len(fasthttp.HeaderUpgrade):
		if bytes.EqualFold(name, []byte(fasthttp.HeaderUpgrade)) {
			return sawUpgrade
		}
	case len(headerProxyConnection):
		if bytes.EqualFold(name, []byte(headerProxyConnection)) {
			return sawHopByHop
		}
	case len(headerTE):
		if bytes.EqualFold(name, []byte(headerTE)) {
			return sawHopByHop
		}
	case len(headerXForwardedFor):
		if bytes.EqualFold(name, []byte(headerXForwardedFor)) {
			return sawXForwardedFor
		}
	case len(headerXForwardedProto):
		if bytes.EqualFold(name, []byte(headerXForwardedProto)) {
			return sawXForwardedProto
		}
	}
	return 0
}

func peekHeaders(hdr *fasthttp.RequestHeader) int {
	saw := 0
	for _, h := range [...]struct {
		name string
		flag int
	}{
		{fasthttp.HeaderConnection, sawUpgrade},
		{fasthttp.HeaderUpgrade, sawUpgrade},
		{headerKeepAlive, sawHopByHop},
		{headerProxyConnection, sawHopByHop},
		{headerTE, sawHopByHop},
		{headerXForwardedFor, sawXForwardedFor},
		{headerXForwardedProto, sawXForwardedProto},
	} {
		if hdr.Peek(h.name) != nil {
			saw |= h.flag
		}
	}
	return saw
}

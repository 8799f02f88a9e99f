package forward

import (
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"coxswain.dev/coxswain/proxy/internal/dataplane/accesslog"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// exchange is one request on its way through the handler.
type exchange struct {
	h        *Handler
	w        http.ResponseWriter
	r        *http.Request
	rc       *http.ResponseController
	listener *Listener
	state    *State
	route    *router.Route
	start    time.Time
	// host is the normalized host the request was routed by; path is the target path in the
	// router's form (see router.CleanPath), which the routes match and the backend receives.
	host, path string
	// port and vhost are what the request's host selects, once looked up (looked).
	port     *router.Port
	vhost    *router.VirtualHost
	looked   bool
	query    url.Values
	upstream string
	// requestID is the request's ID, "" when request IDs are off; requestIDValues are the
	// client's header values that carry it when it is the client's own.
	requestID       string
	requestIDValues []string
	// body is the request body as forwarded, nil before or without one.
	body *requestBody
	// upstreamStatus is the status of the backend's response, 0 before one arrived; retries
	// counts the attempts sent after the first.
	upstreamStatus int
	retries        int
	// connectAt is when the attempt in flight asked for a connection and connect how long it
	// took to get one, both since start, in nanoseconds (set on the engine's goroutine);
	// firstByte is when the backend's response header arrived, since start.
	connectAt, connect atomic.Int64
	firstByte          time.Duration
	// reason says why the proxy, not the backend, chose the status: a refused request, a
	// breached limit, a failed exchange. Empty when the backend answered.
	reason string
	// wrote says the response header went out; bytes counts the body bytes written.
	wrote bool
	bytes int64
	// abort resets the client's stream once the handler returns.
	abort bool
	// closeConn is the proxy's decision that the response ends its connection (a request cap,
	// rapid reset, overload, a request body left unread): writeHeader sends Connection: close,
	// whatever answer goes out.
	closeConn bool
	// sendBy is the deadline of writes to the client, zero until the first.
	sendBy time.Time
	// span is the request's server span, nil when tracing is off.
	span trace.Span
}

// routed adapts the request to the router's header and query lookups.
type routed exchange

func (r *routed) Header(name string) (string, bool) {
	vs := textproto.MIMEHeader(r.r.Header).Values(name)
	if len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

func (r *routed) Query(name string) (string, bool) {
	if r.query == nil {
		r.query, _ = url.ParseQuery(r.r.URL.RawQuery)
	}
	vs, ok := r.query[name]
	if !ok {
		return "", false
	}
	if len(vs) == 0 {
		return "", true
	}
	return vs[0], true
}

// match finds the route of the request, or nil. On an HTTPS port it returns misdirected, and
// no route, when the request's host selects another virtual host than the handshake's server
// name does (see misdirected).
func (x *exchange) match() (route *router.Route, misdirected bool) {
	vh := x.virtualHost()
	if vh == nil {
		return nil, false
	}
	if x.misdirected(x.port, vh) {
		return nil, true
	}
	if x.port.ClientValidation(vh) != nil {
		dropClientCertHeaders(x.r.Header)
	}
	return vh.Match(x.host, x.r.Method, x.path, (*routed)(x)), false
}

// virtualHost returns the virtual host the request's host selects on its port, or nil, and
// sets host to the normalized host.
func (x *exchange) virtualHost() *router.VirtualHost {
	if x.looked {
		return x.vhost
	}
	x.looked = true
	if x.state == nil {
		return nil
	}
	p, ok := x.state.Table.Port(x.listener.Port)
	if !ok {
		return nil
	}
	x.host = router.NormalizeHost(x.r.Host)
	if vh, ok := p.VirtualHost(x.host); ok {
		x.port, x.vhost = p, vh
	}
	return x.vhost
}

// misdirected says whether a request that selects vh arrived on a TLS connection negotiated for
// another virtual host (Gateway listener) of port p, which calls for 421 (RFC 9110 15.5.20):
// a client may reuse a connection for any name its certificate covers, and the Gateway API has
// the listener chosen by the server name answer only for its own hostnames. The server name
// selects a virtual host by the rules the Host does (exact, then the longest wildcard, then the
// catch-all), looked up in the same table as the Host so that both answers are of one table;
// virtual hosts are compared by identity, so listeners sharing a certificate are still told
// apart. A handshake without a server name matches only the catch-all, as a listener hostname
// cannot match an absent name; one whose name selects no virtual host was negotiated for none,
// and every request on it that selects one is misdirected.
func (x *exchange) misdirected(p *router.Port, vh *router.VirtualHost) bool {
	if x.r.TLS == nil || p.Protocol != router.HTTPS {
		return false
	}
	negotiated, _ := p.VirtualHost(router.NormalizeHost(x.r.TLS.ServerName))
	return negotiated != vh
}

// extendSend moves the deadline of the next write to the client SendTimeout ahead. The
// deadline moves only when it has come an eighth of the timeout closer, which spares most
// writes of a fast response the call and keeps the bound within an eighth of itself.
func (x *exchange) extendSend() {
	timeout := x.h.opts.SendTimeout
	now := time.Now()
	if !x.sendBy.IsZero() && x.sendBy.Sub(now) > timeout-timeout/8 {
		return
	}
	x.sendBy = now.Add(timeout)
	_ = x.rc.SetWriteDeadline(x.sendBy)
}

// fail answers with status and an empty body.
func (x *exchange) fail(status int) int {
	if x.wrote {
		return status
	}
	if isGRPC(x.r) {
		return x.grpcReply(status, grpcCode(status))
	}
	hdr := x.w.Header()
	clear(hdr)
	hdr["Content-Length"] = []string{"0"}
	x.writeHeader(status)
	return status
}

// failBackend answers a request whose rule or backend share has nothing to forward to (an
// unresolved backend reference, a rule without backends) with status; a gRPC call gets
// UNAVAILABLE, which the Gateway API requires of a GRPCRoute's invalid backends where an
// HTTPRoute's get 500.
func (x *exchange) failBackend(status int) int {
	if !x.wrote && isGRPC(x.r) {
		return x.grpcReply(status, grpcUnavailable)
	}
	return x.fail(status)
}

// refuse answers a request the proxy turned down, saying why in the access log and metrics.
// After a refused request, or a body not read whole, the rest of the request may still be on
// the wire: the connection is not read for another request.
func (x *exchange) refuse(status int, reason string) int {
	x.reason = reason
	switch status {
	case http.StatusBadRequest, http.StatusRequestTimeout, http.StatusRequestEntityTooLarge, http.StatusRequestHeaderFieldsTooLarge:
		if x.r.ProtoMajor == 1 {
			// On HTTP/2 the stream ends alone; Connection: close would end the connection.
			x.closeConn = true
		}
	}
	if !x.wrote && isGRPC(x.r) {
		return x.grpcReply(status, grpcCode(status))
	}
	return x.failKeep(status)
}

// failKeep is fail that keeps the headers already set (Allow).
func (x *exchange) failKeep(status int) int {
	if x.wrote {
		return status
	}
	x.w.Header()["Content-Length"] = []string{"0"}
	x.writeHeader(status)
	return status
}

// writeHeader sends the response header, with SendTimeout for the client to take it.
func (x *exchange) writeHeader(status int) {
	if x.closeConn {
		x.w.Header()[headerConnection] = []string{"close"}
	}
	x.extendSend()
	x.w.WriteHeader(status)
	x.wrote = true
}

// redirect answers with a Location built from the request and the filter.
func (x *exchange) redirect(rd *router.Redirect) int {
	var b strings.Builder
	b.WriteString(rd.Scheme)
	b.WriteString("://")
	host := rd.Hostname
	if host == "" {
		host = x.host
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is6() {
		host = "[" + host + "]"
	}
	b.WriteString(host)
	if !defaultPort(rd.Scheme, rd.Port) {
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(uint64(rd.Port), 10))
	}
	if rd.Path == nil {
		b.WriteString(x.path)
	} else {
		b.WriteString(escapePath(rd.Path.ReplacePath(x.route, x.path)))
	}
	if q := x.r.URL.RawQuery; q != "" {
		b.WriteByte('?')
		b.WriteString(q)
	}
	hdr := x.w.Header()
	hdr.Set("Location", b.String())
	if c := x.route.CORS; c != nil {
		x.corsResponse(hdr, c)
	}
	return x.failKeep(rd.StatusCode)
}

func (x *exchange) entry(status int, elapsed time.Duration) accesslog.Entry {
	e := accesslog.Entry{
		Start: x.start, Duration: elapsed, RequestID: x.requestID, ClientAddr: x.r.RemoteAddr,
		Protocol: x.r.Proto, Host: x.r.Host, Method: x.r.Method, Path: x.r.URL.Path, Status: status,
		Reason: x.reason, Upstream: x.upstream, UpstreamStatus: x.upstreamStatus, Retries: x.retries,
		BytesOut: x.bytes, UpstreamConnect: time.Duration(x.connect.Load()), TTFB: x.firstByte,
	}
	if t := x.r.TLS; t != nil {
		e.TLSVersion, e.SNI = t.Version, t.ServerName
	}
	if x.vhost != nil {
		e.Listener, e.GatewayListener = x.vhost.Listener, x.vhost.Name
	}
	if x.route != nil {
		e.Route = x.route.Name
	}
	if x.body != nil {
		e.BytesIn = x.body.read.Load()
	}
	return e
}

// escapePath returns a path in the router's form as it is sent: escaped already, so only
// bytes a path may not hold are encoded (see router.EscapePath), never an escape it has.
func escapePath(p string) string { return router.EscapePath(p) }

// defaultPort says whether a Location may omit port for scheme.
func defaultPort(scheme string, port uint32) bool {
	return port == 0 || scheme == "http" && port == 80 || scheme == "https" && port == 443
}

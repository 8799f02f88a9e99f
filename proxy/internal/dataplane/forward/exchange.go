package forward

import (
	"net/netip"
	"net/url"
	"strings"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"coxswain.dev/coxswain/proxy/internal/dataplane/accesslog"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// exchange is one request on its way through the handler. It lives on the stack.
type exchange struct {
	ctx      *fasthttp.RequestCtx
	listener *Listener
	state    *State
	route    *router.Route
	// host and path are the normalized host and the path the route matched; they alias the
	// request's buffers until the request is changed.
	host, path string
	// logHost and logPath are copies for the access log, taken only when it is on.
	logHost, logPath string
	upstream         string
	// clientIP is the client address for X-Forwarded-For when the connection knows it.
	clientIP []byte
}

// b2s views b as a string without copying; the string is valid while b is unchanged.
func b2s(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b)) //nolint:gosec // read-only views that never outlive the request
}

// request adapts the fasthttp request to the router's header and query lookups.
type request fasthttp.RequestCtx

func (r *request) Header(name string) (string, bool) {
	v := (*fasthttp.RequestCtx)(r).Request.Header.Peek(name)
	return b2s(v), v != nil
}

func (r *request) Query(name string) (string, bool) {
	args := (*fasthttp.RequestCtx)(r).QueryArgs()
	v := args.Peek(name)
	return b2s(v), v != nil || args.Has(name)
}

func (x *exchange) keepRequestLine() {
	x.logHost = string(x.ctx.Host())
	x.logPath = string(x.ctx.Path())
}

// match finds the route of the request, or nil.
func (x *exchange) match() *router.Route {
	if x.state == nil {
		return nil
	}
	p, ok := x.state.Table.Port(x.listener.Port)
	if !ok {
		return nil
	}
	x.host = router.NormalizeHost(b2s(x.ctx.Host()))
	vh, ok := p.VirtualHost(x.host)
	if !ok {
		return nil
	}
	x.path = b2s(x.ctx.Path())
	return vh.Match(x.host, b2s(x.ctx.Method()), x.path, (*request)(x.ctx))
}

// fail answers with status and an empty body.
func (x *exchange) fail(status int) int {
	x.ctx.Response.Reset()
	x.ctx.Response.SetStatusCode(status)
	return status
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
		b.WriteString(uitoa(rd.Port))
	}
	if rd.Path == nil {
		b.Write(x.ctx.URI().PathOriginal())
	} else {
		b.WriteString(escapePath(rd.Path.ReplacePath(x.route, x.path)))
	}
	if q := x.ctx.URI().QueryString(); len(q) > 0 {
		b.WriteByte('?')
		b.Write(q)
	}
	status := x.fail(rd.StatusCode)
	x.ctx.Response.Header.Set(fasthttp.HeaderLocation, b.String())
	return status
}

func (x *exchange) entry(status int, elapsed time.Duration) accesslog.Entry {
	e := accesslog.Entry{
		Start: x.ctx.Time(), Duration: elapsed, Protocol: b2s(x.ctx.Request.Header.Protocol()),
		Host: x.logHost, Method: b2s(x.ctx.Method()), Path: x.logPath, Status: status,
		Upstream: x.upstream, Bytes: len(x.ctx.Response.Body()),
	}
	if x.route != nil {
		e.Route = x.route.Name
	}
	return e
}

func uitoa(n uint32) string {
	var buf [10]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(buf[i:])
		}
	}
}

func escapePath(p string) string { return (&url.URL{Path: p}).EscapedPath() }

// defaultPort says whether a Location may omit port for scheme.
func defaultPort(scheme string, port uint32) bool {
	return port == 0 || scheme == "http" && port == 80 || scheme == "https" && port == 443
}

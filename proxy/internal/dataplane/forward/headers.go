package forward

import (
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// Header names the forwarder sets, strips or checks.
const (
	headerForwarded       = "Forwarded"
	headerXForwardedFor   = "X-Forwarded-For"
	headerXForwardedHost  = "X-Forwarded-Host"
	headerXForwardedPort  = "X-Forwarded-Port"
	headerXForwardedProto = "X-Forwarded-Proto"
	headerXRealIP         = "X-Real-Ip"
	headerConnection      = "Connection"
	headerUpgrade         = "Upgrade"
	headerTE              = "Te"
	headerTrailer         = "Trailer"
)

// hopByHop are the fields that describe one connection, never the message (RFC 9110 7.6.1),
// and the framing fields the forwarder sets itself from the body it sends.
var hopByHop = map[string]bool{
	"Connection":          true,
	"Proxy-Connection":    true,
	"Keep-Alive":          true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
	"Proxy-Authorization": true,
	"Proxy-Authenticate":  true,
	"Content-Length":      true,
	"Host":                true,
	"Expect":              true,
	"Http2-Settings":      true,
}

// forwardingFields are the fields through which a backend learns of the client and of the
// request as it arrived: its address, the scheme, Host and port it reached the proxy by. The
// proxy sets every one of them on every request from what it knows (setForwarding), whatever
// the client sent in them.
var forwardingFields = [...]string{
	headerForwarded, headerXForwardedFor, headerXForwardedHost, headerXForwardedPort, headerXForwardedProto, headerXRealIP,
}

// forwardingField says whether the canonical field name is one of forwardingFields.
func forwardingField(name string) bool {
	for _, f := range forwardingFields {
		if name == f {
			return true
		}
	}
	return false
}

// setForwarding sets the forwarding fields of an upstream request from what the proxy knows:
// the client's address (remoteAddr), the Host the request arrived with, the listener's scheme
// and port. X-Forwarded-For keeps the list the client sent before the client's address, which
// ends it; every other field holds the proxy's value alone.
func setForwarding(hdr http.Header, remoteAddr, host string, l *Listener) {
	client := remoteAddr
	if h, _, err := splitHostPort(remoteAddr); err == nil {
		client = h
	}
	// One array holds the six values, each field a slice of one of them: one allocation.
	vs := [len(forwardingFields)]string{
		forwardedElement(client, host, l.Scheme), forwardedFor(hdr[headerXForwardedFor], client), host,
		l.portText(), l.Scheme, client,
	}
	all := vs[:]
	for i, name := range forwardingFields {
		hdr[name] = all[i : i+1 : i+1]
	}
}

// forwardedElement returns the one Forwarded element (RFC 7239 4) the proxy sends: for=, host=
// and proto=, each value quoted when it is not a token (an IPv6 address in brackets, a host
// with a port).
func forwardedElement(client, host, scheme string) string {
	if ip, err := netip.ParseAddr(client); err == nil && ip.Is6() {
		client = "[" + client + "]"
	}
	var b strings.Builder
	b.Grow(len(client) + len(host) + len(scheme) + 24)
	b.WriteString("for=")
	writeForwardedValue(&b, client)
	b.WriteString(";host=")
	writeForwardedValue(&b, host)
	b.WriteString(";proto=")
	writeForwardedValue(&b, scheme)
	return b.String()
}

// writeForwardedValue writes v as a token, or quoted when it is not one. The values are an
// address, a validated Host and a scheme: they hold neither '"' nor '\'.
func writeForwardedValue(b *strings.Builder, v string) {
	if v != "" && strings.IndexFunc(v, func(r rune) bool { return r >= 0x80 || !httpguts.IsTokenRune(r) }) < 0 {
		b.WriteString(v)
		return
	}
	b.WriteByte('"')
	b.WriteString(v)
	b.WriteByte('"')
}

// clientCertHeader says whether the field name is one through which proxies pass a client's
// certificate, or its verdict, to backends: X-Forwarded-Client-Cert (Envoy), Client-Cert and
// Client-Cert-Chain (RFC 9440), X-SSL-* (nginx, HAProxy), SSL-Client-* (nginx's variables as
// fields), X-Client-Cert*, X-Client-Verify, X-Client-DN and the like, X-Forwarded-TLS-Client-*
// (Traefik), X-TLS-Client-*, X-Amzn-Mtls-Clientcert* (AWS), X-ARR-ClientCert (IIS) and Cert-*.
// Names are compared as CGI and the frameworks reading its variables compare them: case and
// '_' against '-' do not tell them apart, so X_ssl_client_verify is X-SSL-Client-Verify. The
// proxy sends none of them: a backend may only ever see them forged.
func clientCertHeader(name string) bool {
	for _, p := range clientCertPrefixes {
		if normalPrefix(name, p) {
			return true
		}
	}
	for _, n := range clientCertNames {
		if len(name) == len(n) && normalPrefix(name, n) {
			return true
		}
	}
	return false
}

// The client certificate fields, in lower case with dashes: prefixes of names, and whole names.
var (
	clientCertPrefixes = [...]string{
		"x-forwarded-client-cert", "client-cert", "x-ssl-", "ssl-client", "x-client-cert",
		"x-forwarded-tls-client", "x-tls-client", "x-amzn-mtls-clientcert", "cert-",
	}
	clientCertNames = [...]string{
		"x-arr-clientcert", "x-client-verify", "x-client-dn", "x-client-s-dn", "x-client-i-dn",
		"x-client-subject", "x-client-issuer", "x-client-serial", "x-client-fingerprint",
	}
)

// normalPrefix says whether name starts with prefix, a lower-case name with dashes, when
// upper case and '_' in name count as lower case and '-'.
func normalPrefix(name, prefix string) bool {
	if len(name) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := name[i]
		switch {
		case c == '_':
			c = '-'
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// droppedUnderscore is the reason of coxswain_proxy_dropped_request_fields_total for a field
// whose name holds an underscore.
const droppedUnderscore = "underscore"

// dropUnderscoreFields removes from h every field whose name holds an underscore, as nginx
// does by default (underscores_in_headers off): CGI turns '-' into '_' when it makes a
// field a variable, and so do the frameworks built on it, so that X_Auth_User reaches a
// backend as the X-Auth-User a route's filter or the backend's own front end controls.
func dropUnderscoreFields(h http.Header) (dropped int) {
	for name := range h {
		if strings.IndexByte(name, '_') >= 0 {
			delete(h, name)
			dropped++
		}
	}
	return dropped
}

// dropClientCertHeaders removes from h every field that claims a client certificate (see
// clientCertHeader); on a listener that validates client certificates a backend could take
// them for the proxy's word.
func dropClientCertHeaders(h http.Header) {
	for name := range h {
		if clientCertHeader(name) {
			delete(h, name)
		}
	}
}

// connectionTokens returns the canonical names a Connection header lists, nil for none.
func connectionTokens(h http.Header) map[string]bool {
	vs := h[headerConnection]
	if len(vs) == 0 {
		return nil
	}
	var out map[string]bool
	for _, v := range vs {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" {
				if out == nil {
					out = map[string]bool{}
				}
				out[textproto.CanonicalMIMEHeaderKey(tok)] = true
			}
		}
	}
	return out
}

// copyEndToEnd copies the end-to-end fields of src into dst: not the hop-by-hop and framing
// fields, nor the fields the Connection header names.
func copyEndToEnd(dst, src http.Header) {
	tokens := connectionTokens(src)
	for k, vs := range src {
		if hopByHop[k] || tokens[k] {
			continue
		}
		dst[k] = vs
	}
}

// modifyHeaders applies a header modifier: remove, then set (which replaces every copy of the
// field), then add.
func modifyHeaders(h http.Header, m *router.HeaderModifier) {
	for _, name := range m.Remove {
		h.Del(name)
	}
	for _, hd := range m.Set {
		h.Set(hd.Name, hd.Value)
	}
	for _, hd := range m.Add {
		h.Add(hd.Name, hd.Value)
	}
}

// managed says whether the proxy sets or strips the field on this route (or on any listener,
// for the client certificate fields), so that a client may not announce it as a trailer,
// where it would escape the proxy's handling.
func managed(r *router.Route, name string) bool {
	name = textproto.CanonicalMIMEHeaderKey(name)
	if hopByHop[name] || forwardingField(name) || clientCertHeader(name) ||
		!httpguts.ValidTrailerHeader(name) {
		return true
	}
	if modifies(r.RequestHeaders, name) {
		return true
	}
	for i := range r.Backends {
		if f := r.Backends[i].Filters; f != nil && modifies(f.RequestHeaders, name) {
			return true
		}
	}
	return false
}

// modifies says whether one of the modifiers sets, adds or removes the field name.
func modifies(mods []*router.HeaderModifier, name string) bool {
	for _, m := range mods {
		for _, hd := range m.Set {
			if strings.EqualFold(hd.Name, name) {
				return true
			}
		}
		for _, hd := range m.Add {
			if strings.EqualFold(hd.Name, name) {
				return true
			}
		}
		for _, rm := range m.Remove {
			if strings.EqualFold(rm, name) {
				return true
			}
		}
	}
	return false
}

// announcedTrailers checks the client's Trailer announcements; false when one names a field
// the proxy manages.
func announcedTrailers(req *http.Request, r *router.Route) bool {
	for _, v := range req.Header.Values(headerTrailer) {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" && managed(r, name) {
				return false
			}
		}
	}
	for name := range req.Trailer {
		if managed(r, name) {
			return false
		}
	}
	return true
}

// dropManagedTrailers removes from trailers, as they arrived, every field the route manages:
// HTTP/2 clients may send trailers they did not announce.
func dropManagedTrailers(t http.Header, r *router.Route) {
	for name := range t {
		if managed(r, name) {
			delete(t, name)
		}
	}
}

// dropFilteredTrailers removes from a response's trailers every field that the route's or
// backend b's response header filters set, add or remove: the filters apply to the header,
// and a trailer of the same field would bring back what they removed or replaced.
func dropFilteredTrailers(t http.Header, r *router.Route, b *router.Backend) {
	for name := range t {
		if modifies(r.ResponseHeaders, name) || b.Filters != nil && modifies(b.Filters.ResponseHeaders, name) {
			delete(t, name)
		}
	}
}

// isWebSocket says whether the request asks to upgrade to WebSocket (HTTP/1.1 only: HTTP/2
// has no Upgrade).
func isWebSocket(r *http.Request) bool {
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 {
		return false
	}
	return httpguts.HeaderValuesContainsToken(r.Header[headerConnection], "upgrade") &&
		httpguts.HeaderValuesContainsToken(r.Header[headerUpgrade], "websocket")
}

// upgradesToWebSocket says whether a 101 switches to WebSocket, the one protocol the proxy
// asks for: its Upgrade names websocket alone and its Connection names upgrade (RFC 6455 4.1).
func upgradesToWebSocket(resp *http.Response) bool {
	vs := resp.Header[headerUpgrade]
	return len(vs) == 1 && strings.EqualFold(textproto.TrimString(vs[0]), "websocket") &&
		httpguts.HeaderValuesContainsToken(resp.Header[headerConnection], "upgrade")
}

// forwardedFor returns the X-Forwarded-For value to send: every value the request brought,
// as one list, then the client's address.
func forwardedFor(prior []string, client string) string {
	if len(prior) == 0 {
		return client
	}
	n := len(client)
	for _, p := range prior {
		n += len(p) + 2
	}
	var b strings.Builder
	b.Grow(n)
	for _, p := range prior {
		b.WriteString(p)
		b.WriteString(", ")
	}
	b.WriteString(client)
	return b.String()
}

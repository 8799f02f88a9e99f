package h1client

import (
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Errors of a request the transport will not write.
var (
	ErrInvalidMethod = errors.New("h1client: invalid request method")
	ErrInvalidTarget = errors.New("h1client: invalid request target")
	ErrInvalidHost   = errors.New("h1client: invalid Host")
	ErrInvalidField  = errors.New("h1client: invalid header field")
)

// framing is how a request's body goes out.
type framing struct {
	// length is the body's length, -1 for chunked; 0 without a body.
	length  int64
	chunked bool
	// upgrade says the request asks to switch protocols (Connection: Upgrade with Upgrade).
	upgrade bool
}

// connectionFields are the fields the transport writes itself or never forwards: the framing,
// the Host, and those that describe one connection. Keys as http.Header canonicalizes them.
var connectionFields = map[string]bool{
	"Host":              true,
	"Content-Length":    true,
	"Transfer-Encoding": true,
	"Trailer":           true,
	"Connection":        true,
	"Keep-Alive":        true,
	"Proxy-Connection":  true,
	"Te":                true,
	"Upgrade":           true,
}

// appendHead appends the request head to b: the request line, exactly one Host, the fields of
// req.Header in the order of their names (values in order, each on its own line) without any
// connection or framing field, then the connection and framing fields the transport decides:
// Connection: Upgrade with the Upgrade values for an upgrade, Connection: close for
// req.Close, TE: trailers when asked, and at most one of Content-Length and
// Transfer-Encoding, with the Trailer announcement of a chunked body.
func (c *conn) appendHead(b []byte, req *http.Request, f framing) ([]byte, error) {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	if !httpguts.ValidHeaderFieldName(method) { // a token
		return nil, ErrInvalidMethod
	}
	b = append(b, method...)
	b = append(b, ' ')
	var err error
	if b, err = appendTarget(b, req.URL); err != nil {
		return nil, err
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	host := req.Host
	if host == "" && req.URL != nil {
		host = req.URL.Host
	}
	if host == "" || !httpguts.ValidHostHeader(host) {
		return nil, ErrInvalidHost
	}
	b = append(b, host...)
	b = append(b, "\r\n"...)
	if b, err = c.appendFields(b, req.Header); err != nil {
		return nil, err
	}
	return appendFraming(b, req, f)
}

// appendTarget appends the request-target of u in origin-form: its opaque part as it is (the
// forwarder's escaped path), else its escaped path, then the query; "*" alone for OPTIONS *.
// Unlike net/http it never writes the absolute-form (for an opaque "//x" net/http writes
// "http://x", which a backend takes as the host); a target that does not start with "/",
// or holds a control byte or a space, is refused.
func appendTarget(b []byte, u *url.URL) ([]byte, error) {
	if u == nil {
		return nil, ErrInvalidTarget
	}
	start := len(b)
	switch {
	case u.Opaque != "":
		b = append(b, u.Opaque...)
	default:
		b = append(b, u.EscapedPath()...)
		if len(b) == start {
			b = append(b, '/')
		}
	}
	if t := b[start:]; t[0] != '/' && string(t) != "*" {
		return nil, ErrInvalidTarget
	}
	if u.ForceQuery || u.RawQuery != "" {
		b = append(b, '?')
		b = append(b, u.RawQuery...)
	}
	return b, checkTarget(b[start:])
}

// checkTarget refuses a target with a control byte or a space, or a path (before any "?")
// with a "%" not followed by two hex digits, which net/http and most servers refuse.
func checkTarget(t []byte) error {
	inPath := true
	for i, ch := range t {
		switch {
		case ch <= ' ' || ch == 0x7f:
			return ErrInvalidTarget
		case ch == '?':
			inPath = false
		case ch == '%' && inPath && (i+2 >= len(t) || !isHex(t[i+1]) || !isHex(t[i+2])):
			return ErrInvalidTarget
		}
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// appendFields appends the end-to-end fields of h, sorted by name: none of connectionFields,
// none named by a Connection field, and no User-Agent without a value.
func (c *conn) appendFields(b []byte, h http.Header) ([]byte, error) {
	named := h["Connection"]
	keys := c.keys[:0]
	for k := range h {
		if !connectionFields[textproto.CanonicalMIMEHeaderKey(k)] && !listed(named, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	c.keys = keys[:0]
	for _, k := range keys {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, ErrInvalidField
		}
		for _, v := range h[k] {
			var err error
			if b, err = appendField(b, k, v); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

// appendField appends "name: value" with the value's optional whitespace trimmed.
func appendField(b []byte, name, v string) ([]byte, error) {
	if !httpguts.ValidHeaderFieldValue(v) {
		return nil, ErrInvalidField
	}
	b = append(b, name...)
	b = append(b, ": "...)
	b = append(b, textproto.TrimString(v)...)
	return append(b, "\r\n"...), nil
}

// listed reports whether a Connection field in vs names the field k.
func listed(vs []string, k string) bool {
	for _, v := range vs {
		for tok := range strings.SplitSeq(v, ",") {
			if asciiFold(textproto.TrimString(tok), k) {
				return true
			}
		}
	}
	return false
}

// appendFraming appends the connection and framing fields and the empty line ending the head.
func appendFraming(b []byte, req *http.Request, f framing) ([]byte, error) {
	var err error
	switch {
	case f.upgrade:
		b = append(b, "Connection: Upgrade\r\n"...)
		for _, v := range req.Header["Upgrade"] {
			if b, err = appendField(b, "Upgrade", v); err != nil {
				return nil, err
			}
		}
	case req.Close:
		b = append(b, "Connection: close\r\n"...)
	}
	if httpguts.HeaderValuesContainsToken(req.Header["Te"], "trailers") {
		b = append(b, "TE: trailers\r\n"...)
	}
	switch {
	case f.chunked:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
		if b, err = appendTrailerNames(b, req.Trailer); err != nil {
			return nil, err
		}
	case f.length > 0 || f.length == 0 && sendsZeroLength(req.Method):
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, f.length, 10)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...), nil
}

// sendsZeroLength says a request without a body announces Content-Length: 0, as net/http
// does for the methods that usually have one.
func sendsZeroLength(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// appendTrailerNames announces the trailer fields of a chunked body, sorted; a name that is no
// token, or one that frames the message, is refused.
func appendTrailerNames(b []byte, tr http.Header) ([]byte, error) {
	if len(tr) == 0 {
		return b, nil
	}
	names := make([]string, 0, len(tr))
	for k := range tr {
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if !httpguts.ValidHeaderFieldName(k) || connectionFields[ck] {
			return nil, ErrInvalidField
		}
		names = append(names, ck)
	}
	slices.Sort(names)
	b = append(b, "Trailer: "...)
	b = append(b, strings.Join(names, ", ")...)
	return append(b, "\r\n"...), nil
}

// requestFraming returns how req's body goes out, and the body to send: with its
// Content-Length when known and without trailers, chunked otherwise (a body whose length is
// 0 but that is not http.NoBody is of unknown length, as net/http takes it for a POST; the
// body is never read ahead to find out).
func requestFraming(req *http.Request) (framing, io.Reader) {
	f := framing{upgrade: isUpgrade(req.Header)}
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return f, nil
	case req.ContentLength > 0 && len(req.Trailer) == 0:
		f.length = req.ContentLength
		return f, req.Body
	}
	f.length, f.chunked = -1, true
	return f, req.Body
}

// isUpgrade reports a request asking to switch protocols.
func isUpgrade(h http.Header) bool {
	return len(h["Upgrade"]) > 0 && httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade")
}

// asciiFold reports whether a and b are equal ignoring ASCII case only (strings.EqualFold
// folds Unicode too, and takes two invalid bytes for the same rune).
func asciiFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

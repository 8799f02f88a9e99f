package h1server

import (
	"context"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"unsafe"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// errBadRequest refuses a head the codec accepted but net/http's server would not turn into a
// request: a target url.ParseRequestURI refuses, a Trailer field naming a framing field.
var (
	errBadTarget  = &http1.Error{Status: http.StatusBadRequest, Reason: "invalid_target"}
	errBadTrailer = &http1.Error{Status: http.StatusBadRequest, Reason: "invalid_trailer_field"}
)

// methods are the method strings that need no allocation.
var methods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace,
}

// newRequest turns the parsed head into the request net/http's server would hand the handler,
// with its body, and consumes the head from the buffer. The head becomes one string, of which
// every string of the request is a part.
func (c *conn) newRequest(ctx context.Context) (*http.Request, *body, error) {
	h := &c.head
	b, _ := c.br.Peek(h.HeadLen)
	s := string(b)
	// base is filled in place and copied once into the request WithContext returns.
	base := http.Request{
		Method: method(h.Method, s, b), RequestURI: substring(s, b, h.Target),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: h.Minor,
		Header: header(h.Fields, s, b), Close: !h.KeepAlive, RemoteAddr: c.remote, TLS: c.tls,
	}
	if h.Minor == 0 {
		base.Proto = "HTTP/1.0"
	}
	u, err := parseTarget(base.Method, base.RequestURI)
	if err != nil {
		return nil, nil, errBadTarget
	}
	base.URL = u
	base.Host = u.Host
	if base.Host == "" {
		base.Host = substring(s, b, h.Host)
	}
	delete(base.Header, "Host")
	fixPragmaCacheControl(base.Header)
	if err := c.frame(&base); err != nil {
		return nil, nil, err
	}
	_, _ = c.br.Discard(h.HeadLen)
	req := base.WithContext(ctx)
	bd := c.newBody(req)
	if bd != nil {
		req.Body = bd
	}
	return req, bd, nil
}

// frame sets the request's length, transfer coding and announced trailers as net/http's
// readTransfer does: a request with neither Content-Length nor chunked has none (0), and the
// Transfer-Encoding and, when chunked, Trailer fields leave the header for their fields.
func (c *conn) frame(req *http.Request) error {
	h := &c.head
	switch {
	case h.Chunked:
		req.ContentLength = -1
		req.TransferEncoding = []string{"chunked"}
		delete(req.Header, "Transfer-Encoding")
		t, err := announcedTrailer(req.Header)
		if err != nil {
			return err
		}
		req.Trailer = t
	case h.ContentLength > 0:
		req.ContentLength = h.ContentLength
	}
	if req.ContentLength == 0 {
		req.Body = http.NoBody
	}
	return nil
}

// announcedTrailer returns the trailer fields the Trailer field announces, with no values, and
// removes it from the header.
func announcedTrailer(hdr http.Header) (http.Header, error) {
	vv, ok := hdr["Trailer"]
	if !ok {
		return nil, nil
	}
	delete(hdr, "Trailer")
	t := http.Header{}
	for _, v := range vv {
		for k := range strings.SplitSeq(v, ",") {
			k = textproto.TrimString(k)
			if k == "" {
				continue
			}
			k = http.CanonicalHeaderKey(k)
			switch k {
			case "Transfer-Encoding", "Trailer", "Content-Length":
				return nil, errBadTrailer
			}
			t[k] = nil
		}
	}
	if len(t) == 0 {
		return nil, nil
	}
	return t, nil
}

// parseTarget parses the request target as net/http's readRequest does.
func parseTarget(method, target string) (*url.URL, error) {
	justAuthority := method == http.MethodConnect && !strings.HasPrefix(target, "/")
	raw := target
	if justAuthority {
		raw = "http://" + target
	}
	u, err := url.ParseRequestURI(raw)
	if err != nil {
		return nil, err
	}
	if justAuthority {
		u.Scheme = ""
	}
	return u, nil
}

// header returns the fields as a header with canonical keys, values in arrival order; s is the
// head b as a string.
func header(fields []http1.Field, s string, b []byte) http.Header {
	hdr := make(http.Header, len(fields))
	vals := make([]string, len(fields))
	for i, f := range fields {
		k := textproto.CanonicalMIMEHeaderKey(substring(s, b, f.Name))
		vals[i] = substring(s, b, f.Value)
		if vs, ok := hdr[k]; ok {
			hdr[k] = append(vs, vals[i])
			continue
		}
		hdr[k] = vals[i : i+1 : i+1]
	}
	return hdr
}

// fixPragmaCacheControl adds Cache-Control: no-cache to an HTTP/1.0 Pragma: no-cache, as
// net/http does (RFC 7234 section 5.4).
func fixPragmaCacheControl(hdr http.Header) {
	if hp, ok := hdr["Pragma"]; ok && len(hp) > 0 && hp[0] == "no-cache" {
		if _, presentcc := hdr["Cache-Control"]; !presentcc {
			hdr["Cache-Control"] = []string{"no-cache"}
		}
	}
}

func method(m []byte, s string, b []byte) string {
	for _, name := range methods {
		if string(m) == name {
			return name
		}
	}
	return substring(s, b, m)
}

// substring returns x, a slice of b, as the same bytes of s, the string of b; a copy when x is
// not within b.
func substring(s string, b, x []byte) string {
	if len(x) == 0 {
		return ""
	}
	// The offset of x in b, from their addresses: the parser's slices may have any capacity.
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(x))) - uintptr(unsafe.Pointer(unsafe.SliceData(b)))) //nolint:gosec // address arithmetic only, checked against the bounds and bytes below
	if off >= 0 && off+len(x) <= len(s) && s[off:off+len(x)] == string(x) {
		return s[off : off+len(x)]
	}
	return string(x)
}

package router

import "strings"

// The paths the router matches are in one form, which the request path, the route values and
// the path forwarded to a backend share (docs/paths.md): escaped as on the wire, with the
// percent-encoded unreserved characters decoded, the other escapes in upper case, dot segments
// removed and repeated slashes merged. An encoded slash (%2F) or backslash (%5C) stays encoded:
// it is part of a segment, never a separator, for matching and forwarding alike.

// CleanPath returns the escaped origin-form path p in the router's form, or false when p is
// not one: it does not start with a slash, or holds a malformed escape.
func CleanPath(p string) (string, bool) {
	if p == "" {
		return "/", true
	}
	if p[0] != '/' {
		return "", false
	}
	if !strings.Contains(p, "%") && !strings.Contains(p, "/.") && !strings.Contains(p, "//") {
		return p, true
	}
	p, ok := decodeUnreserved(p)
	if !ok {
		return "", false
	}
	return removeDotSegments(p), true
}

// canonicalValue puts a configured path (a match value or a replacement) in the router's form
// without resolving its dot segments: what the configuration says is kept, only its escapes
// are made to compare equal to a request's.
func canonicalValue(p string) string {
	p, _ = decodeUnreserved(EscapePath(p)) // EscapePath leaves no malformed escape
	return p
}

// EscapePath percent-encodes the bytes a path may not hold as they are and keeps the escapes
// p already has, so that it changes nothing of a path in the router's form. It takes the
// bytes Go's URL parser leaves unescaped in a path (RFC 3986 pchar, '/', '[' and ']').
func EscapePath(p string) string {
	i := 0
	for i < len(p) && (pathByte(p[i]) || p[i] == '%' && validEscape(p, i)) {
		i++
	}
	if i == len(p) {
		return p
	}
	var b strings.Builder
	b.Grow(len(p) + 8)
	b.WriteString(p[:i])
	for ; i < len(p); i++ {
		c := p[i]
		if pathByte(c) || c == '%' && validEscape(p, i) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&15])
	}
	return b.String()
}

// SeparatorReading returns the path a backend reads in p (in the router's form) when it takes
// encoded slashes and backslashes for separators and drops ';' parameters from segments, as
// some servers do; ambiguous is false when p holds none of them, so that every reading agrees.
// ok is false when that reading holds a dot segment or an empty segment before the last: a
// backend reading it so would resolve the path to another than the one routed.
func SeparatorReading(p string) (reading string, ambiguous, ok bool) {
	if !strings.Contains(p, "%2F") && !strings.Contains(p, "%5C") && !strings.Contains(p, ";") {
		return p, false, true
	}
	r := strings.NewReplacer("%2F", "/", "%5C", "/").Replace(p)
	segs := strings.Split(r[1:], "/")
	for i, s := range segs {
		s, _, _ = strings.Cut(s, ";")
		segs[i] = s
		if s == "." || s == ".." || s == "" && i < len(segs)-1 {
			return "", true, false
		}
	}
	return "/" + strings.Join(segs, "/"), true, true
}

// decodeUnreserved decodes %XX escapes of unreserved characters (RFC 3986 6.2.2.2) and
// upper-cases the hex digits of the others; it fails on a malformed escape.
func decodeUnreserved(p string) (string, bool) {
	if !strings.Contains(p, "%") {
		return p, true
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if !validEscape(p, i) {
			return "", false
		}
		v := unhex(p[i+1])<<4 | unhex(p[i+2])
		if isUnreserved(v) {
			b.WriteByte(v)
		} else {
			b.WriteByte('%')
			b.WriteByte(upperHex[v>>4])
			b.WriteByte(upperHex[v&15])
		}
		i += 2
	}
	return b.String(), true
}

// removeDotSegments applies RFC 3986 5.2.4 to an absolute path and merges repeated slashes.
func removeDotSegments(p string) string {
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		case "":
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}

const upperHex = "0123456789ABCDEF"

// validEscape says whether p[i], a '%', starts a well-formed escape.
func validEscape(p string, i int) bool {
	return i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2])
}

// pathByte says whether c may stand unescaped in a path.
func pathByte(c byte) bool {
	if isUnreserved(c) {
		return true
	}
	switch c {
	case '/', ':', '@', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', '[', ']':
		return true
	}
	return false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

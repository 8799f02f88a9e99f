package http1

import "bytes"

// The request-target's forms (RFC 9112 section 3.2) and the authority's grammar (RFC 3986
// section 3.2, as RFC 9110 section 4.2.1 restricts it for http and https).

// targetChar holds the bytes an origin-form path or query may hold as they are: VCHAR but "#"
// (a fragment is never sent, RFC 9110 section 4.2.4) and "%", which must start an escape. The
// other bytes RFC 3986 would have escaped ("{", "|", "^", ...) are kept: clients send them and
// net/http and nginx pass them on.
var targetChar = func() (t [256]bool) {
	for c := 0x21; c <= 0x7e; c++ {
		t[c] = true
	}
	t['#'], t['%'] = false, false
	return t
}()

// regNameChar holds the bytes of a reg-name or IPv4address: unreserved and sub-delims. Escapes
// are refused: a host needs none, and their decoding differs between parsers.
var regNameChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-._~!$&'()*+,;=" {
		t[c] = true
	}
	return t
}()

// parseTarget checks r.Target against its method's forms and sets r.Host from an
// absolute-form or authority-form target.
func parseTarget(r *Request) error {
	t := r.Target
	switch {
	case string(r.Method) == "CONNECT":
		return parseAuthorityForm(r)
	case t[0] == '/':
		return checkPathQuery(t)
	case len(t) == 1 && t[0] == '*':
		if string(r.Method) != "OPTIONS" {
			return errTarget
		}
		return nil
	}
	return parseAbsoluteForm(r)
}

// parseAuthorityForm checks a CONNECT target, uri-host ":" port (RFC 9112 section 3.2.3). The
// verdict on CONNECT itself is the caller's.
func parseAuthorityForm(r *Request) error {
	if r.Target[0] == '/' || r.Target[0] == '*' {
		return errTarget
	}
	if err := checkHost(r.Target, true); err != nil {
		return err
	}
	r.Host = r.Target
	return nil
}

// parseAbsoluteForm checks an absolute-form target: "http" or "https" (case-insensitive),
// "://", a non-empty authority without userinfo, a path-abempty and a query.
func parseAbsoluteForm(r *Request) error {
	t := r.Target
	var rest []byte
	switch {
	case len(t) >= len("http://") && asciiFold(t[:len("http://")], "http://"):
		rest = t[len("http://"):]
	case len(t) >= len("https://") && asciiFold(t[:len("https://")], "https://"):
		rest = t[len("https://"):]
	default:
		return errTarget
	}
	end := len(rest)
	for i, c := range rest {
		if c == '/' || c == '?' {
			end = i
			break
		}
	}
	if err := checkHost(rest[:end], false); err != nil {
		return err
	}
	if err := checkPathQuery(rest[end:]); err != nil {
		return err
	}
	r.Host = rest[:end:end]
	return nil
}

// checkPathQuery checks the bytes of a path and query: targetChar, and "%" HEXDIG HEXDIG.
func checkPathQuery(p []byte) error {
	for i := plainTargetPrefix(p); i < len(p); i++ {
		c := p[i]
		if targetChar[c] {
			continue
		}
		if c != '%' || i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
			return errTarget
		}
		i += 2
	}
	return nil
}

// checkHost checks h as uri-host [":" port], with the port required when needPort is set. The
// uri-host is an IP-literal holding an IPv6 address, or a reg-name (which covers IPv4address);
// userinfo has its own reason.
func checkHost(h []byte, needPort bool) error {
	name, port, err := splitHostPort(h)
	if err != nil {
		return err
	}
	if len(name) == 0 || needPort && len(port) == 0 {
		return errHost
	}
	for _, c := range port {
		if !isDigit(c) {
			return errHost
		}
	}
	if name[0] == '[' {
		if !validIPv6(name[1 : len(name)-1]) {
			return errHost
		}
		return nil
	}
	for _, c := range name {
		if !regNameChar[c] {
			return errHost
		}
	}
	return nil
}

// splitHostPort splits h into its uri-host and the digits after its port's colon.
func splitHostPort(h []byte) (name, port []byte, err error) {
	if bytes.IndexByte(h, '@') >= 0 {
		return nil, nil, errUserinfo
	}
	end := len(h)
	if len(h) > 0 && h[0] == '[' {
		if end = bytes.IndexByte(h, ']') + 1; end == 0 {
			return nil, nil, errHost
		}
	} else if i := bytes.IndexByte(h, ':'); i >= 0 {
		end = i
	}
	switch {
	case end == len(h):
		return h, nil, nil
	case h[end] != ':':
		return nil, nil, errHost
	}
	return h[:end], h[end+1:], nil
}

// validIPv6 reports whether s is an IPv6address of RFC 3986 section 3.2.2: eight groups of one
// to four hexadecimal digits, with at most one "::" standing for one or more zero groups, the
// last two of which may be an IPv4 address. Zones are refused.
func validIPv6(s []byte) bool {
	groups, ellipsis, i := 0, false, 0
	if len(s) >= 2 && s[0] == ':' && s[1] == ':' {
		ellipsis, i = true, 2
	}
	for i < len(s) {
		j := i
		for j < len(s) && j-i < 4 && isHex(s[j]) {
			j++
		}
		if j == i {
			return false
		}
		if j < len(s) && s[j] == '.' {
			if !validIPv4(s[i:]) {
				return false
			}
			groups += 2
			break
		}
		groups++
		if i = j; i == len(s) {
			break
		}
		if s[i] != ':' || i+1 == len(s) {
			return false
		}
		if i++; s[i] == ':' {
			if ellipsis {
				return false
			}
			ellipsis = true
			i++
		}
	}
	if ellipsis {
		return groups <= 7
	}
	return groups == 8
}

// validIPv4 reports whether s is a dotted-decimal IPv4 address with no leading zeros.
func validIPv4(s []byte) bool {
	parts := 0
	for len(s) > 0 {
		n, digits := 0, 0
		for digits < len(s) && isDigit(s[digits]) {
			n = n*10 + int(s[digits]-'0')
			digits++
			if digits > 3 {
				return false
			}
		}
		if digits == 0 || n > 255 || digits > 1 && s[0] == '0' {
			return false
		}
		parts++
		s = s[digits:]
		if len(s) > 0 {
			if s[0] != '.' || len(s) == 1 {
				return false
			}
			s = s[1:]
		}
	}
	return parts == 4
}

// isHex reports whether c is a hexadecimal digit.
func isHex(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

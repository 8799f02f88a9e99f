package http1

import "bytes"

// Request is a parsed request head. Its byte slices point into the buffer it was parsed from
// and are valid until that buffer is reused.
type Request struct {
	// Method and Target are the request line's first two words.
	Method, Target []byte
	// Minor is the minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
	Minor int
	// Fields are the header fields in arrival order, duplicates kept. The next parse into the
	// same Request reuses the slice (Fields[:0]).
	Fields []Field
	// Host is the authority: the target's for absolute-form and authority-form (RFC 9112
	// section 3.2.2), else the Host field's value (empty for an HTTP/1.0 request without one).
	Host []byte
	// ContentLength is the Content-Length field's value, -1 without one.
	ContentLength int64
	// Chunked says the body is chunked (Transfer-Encoding: chunked).
	Chunked bool
	// KeepAlive says the connection persists after this exchange (RFC 9112 section 9.3): by
	// default in HTTP/1.1 unless Connection has "close"; in HTTP/1.0 only with "keep-alive"
	// and without "close".
	KeepAlive bool
	// Expect100 says an HTTP/1.1 request carries Expect: 100-continue (ignored in HTTP/1.0,
	// RFC 9110 section 10.1.1).
	Expect100 bool
	// HeadLen is the length of the head, its final CRLF included: where the body starts.
	HeadLen int
}

// reset clears r for a new parse, keeping the capacity of its Fields.
func (r *Request) reset() {
	*r = Request{Fields: r.Fields[:0], ContentLength: -1}
}

// ParseRequest parses the request head at the start of b into r.
//
// It returns ErrIncomplete when b holds no whole head yet and no limit has been passed, and an
// *Error (status and reason) when the request must be refused. The limits are checked on
// partial input, so that a head is refused as soon as it passes one, and a field line as soon
// as its fault has arrived; no byte past MaxHeaderBytes is looked at, so the verdict does not
// depend on how the bytes arrive. It accepts only the strict grammar of RFC 9112 (CRLF line
// endings, one SP between the request line's words, no obs-fold, no whitespace before a
// colon, no empty line before the request line) and the framing of section 6: exactly one
// "chunked" Transfer-Encoding or one Content-Length. A CONNECT is parsed (its authority-form
// target becomes Host) and its verdict left to the caller. lim may be nil for the defaults.
//
// A parse allocates nothing once r.Fields has the capacity of the head's fields. Since every
// call starts again at b's first byte, a caller reading a head should call it again only once
// the new bytes hold a LF or pass a limit.
func ParseRequest(b []byte, r *Request, lim *Limits) error {
	maxBytes, maxCount, maxLine := requestLimits(lim)
	r.reset()
	start, err := parseRequestLine(b, r, maxBytes, maxLine)
	if err != nil {
		return err
	}
	var h headState
	if err := parseFields(b, start, r, &h, maxBytes, maxCount); err != nil {
		return err
	}
	return h.finish(r)
}

// requestLimits returns the limits of lim with the defaults in place of zeros. The request line
// limit leaves room in the head for its CRLF, so that the request line is refused 414 whatever
// the order in which the limits are passed.
func requestLimits(lim *Limits) (maxBytes, maxCount, maxLine int) {
	maxBytes, maxCount, maxLine = DefaultMaxHeaderBytes, DefaultMaxHeaderCount, DefaultMaxRequestLine
	if lim != nil {
		if lim.MaxHeaderBytes > 0 {
			maxBytes = lim.MaxHeaderBytes
		}
		if lim.MaxHeaderCount > 0 {
			maxCount = lim.MaxHeaderCount
		}
		if lim.MaxRequestLine > 0 {
			maxLine = lim.MaxRequestLine
		}
	}
	maxLine = min(maxLine, maxBytes-2)
	return maxBytes, maxCount, maxLine
}

// parseRequestLine parses the request line at the start of b into r and returns where the
// first field line starts.
func parseRequestLine(b []byte, r *Request, maxBytes, maxLine int) (int, error) {
	i := bytes.IndexByte(b, '\n')
	switch {
	case i < 0 && len(b) > maxLine+1, i > maxLine+1:
		return 0, errRequestLineLong
	case i < 0 && len(b) > maxBytes, i >= maxBytes:
		return 0, errHeadTooLarge
	case i < 0:
		return 0, ErrIncomplete
	case i == 0 || b[i-1] != '\r':
		return 0, errBareLF
	case i == 1:
		return 0, errEmptyLine
	}
	line := b[:i-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return 0, errBareCR
	}
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return 0, errRequestLine
	}
	r.Method = line[:sp:sp]
	if !IsToken(r.Method) {
		return 0, errMethod
	}
	if HasLowerCase(r.Method) {
		return 0, errMethodCase
	}
	rest := line[sp+1:]
	sp = bytes.IndexByte(rest, ' ')
	if sp <= 0 {
		return 0, errRequestLine
	}
	r.Target = rest[:sp:sp]
	minor, err := parseVersion(rest[sp+1:])
	if err != nil {
		return 0, err
	}
	r.Minor = minor
	if err := parseTarget(r); err != nil {
		return 0, err
	}
	return i + 1, nil
}

// parseVersion returns the minor version of "HTTP/1.1" or "HTTP/1.0", and refuses any other
// version: 505 when it is well-formed (RFC 9110 section 15.6.6), else 400.
func parseVersion(v []byte) (int, error) {
	if len(v) != len("HTTP/1.1") || string(v[:5]) != "HTTP/" || v[6] != '.' ||
		!isDigit(v[5]) || !isDigit(v[7]) {
		return 0, errVersion
	}
	if v[5] != '1' || v[7] > '1' {
		return 0, errUnsupportedVer
	}
	return int(v[7] - '0'), nil
}

// isDigit reports whether c is an ASCII digit.
func isDigit(c byte) bool { return '0' <= c && c <= '9' }

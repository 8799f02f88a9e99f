package http1

import (
	"math"
	"net/http"
)

// Framing says how the body of a response is delimited (RFC 9112 section 6.3).
type Framing uint8

const (
	// FramingNone is a response without a body: to HEAD, a 1xx, 204 or 304.
	FramingNone Framing = iota
	// FramingLength is a body of Response.ContentLength bytes.
	FramingLength
	// FramingChunked is a chunked body, with its trailer section.
	FramingChunked
	// FramingClose is a body that ends when the backend closes the connection.
	FramingClose
)

// Response is the head of a response from a backend, parsed by ParseResponse.
type Response struct {
	// Minor is the minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
	Minor int
	// Status is the status code, 100 to 599.
	Status int
	// Reason is the reason phrase, possibly empty.
	Reason []byte
	// Fields are the header fields in arrival order, slices of the parsed bytes.
	Fields []Field
	// ContentLength is what net/http's Response.ContentLength would be: the body's length
	// when Framing is FramingLength, 0 for a 1xx, 204 or 304, the announced length (or -1)
	// for a response to HEAD, and -1 for a chunked or close-delimited body.
	ContentLength int64
	// Framing is how the body is delimited.
	Framing Framing
	// Chunked says the response has Transfer-Encoding: chunked, whether or not it has a body.
	Chunked bool
	// KeepAlive says the connection may carry another request once the body was read whole:
	// HTTP/1.1 without Connection: close, or HTTP/1.0 with Connection: keep-alive; never
	// after a close-delimited body or a response with both Transfer-Encoding and
	// Content-Length.
	KeepAlive bool
	// Upgrade says the response's Connection field lists upgrade.
	Upgrade bool
	// HeadLen is the length of the head, its final empty line included.
	HeadLen int
}

// Reasons of the responses ParseResponse refuses; the allow-list keys of the differential
// tests (docs/http1-engine.md lists those net/http accepts).
const (
	ReasonRespStatusLine     = "response_bad_status_line"
	ReasonRespVersion        = "response_bad_version"
	ReasonRespStatus         = "response_bad_status"
	ReasonRespBareLF         = "response_bare_lf"
	ReasonRespObsFold        = "response_obs_fold"
	ReasonRespSpaceColon     = "response_space_before_colon"
	ReasonRespFieldName      = "response_bad_field_name"
	ReasonRespFieldValue     = "response_bad_field_value"
	ReasonRespTooLarge       = "response_head_too_large"
	ReasonRespTooMany        = "response_too_many_fields"
	ReasonRespContentLength  = "response_bad_content_length"
	ReasonRespDuplicateCL    = "response_duplicate_content_length"
	ReasonRespTE             = "response_bad_transfer_encoding"
	ReasonRespTEHTTP10       = "response_transfer_encoding_http10"
	ReasonRespTrailerAnnounc = "response_bad_trailer_announcement"
)

func respError(reason string) *Error { return &Error{Status: http.StatusBadGateway, Reason: reason} }

// ParseResponse parses the response head at the start of b, for a request whose method was
// HEAD when head is true. It returns ErrIncomplete when b holds no whole head yet and no
// limit was reached, or an *Error (status 502) for a head it refuses. Fields reuses r.Fields'
// array: nothing is allocated once it is large enough.
func ParseResponse(b []byte, head bool, r *Response, lim *Limits) error {
	maxBytes := DefaultMaxHeaderBytes
	maxCount := DefaultMaxHeaderCount
	if lim != nil && lim.MaxHeaderBytes > 0 {
		maxBytes = lim.MaxHeaderBytes
	}
	if lim != nil && lim.MaxHeaderCount > 0 {
		maxCount = lim.MaxHeaderCount
	}
	r.Fields = r.Fields[:0]
	line, next, err := respLine(b, 0, maxBytes)
	if err != nil {
		return err
	}
	if err := r.statusLine(line); err != nil {
		return err
	}
	for pos := next; ; pos = next {
		line, next, err = respLine(b, pos, maxBytes)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			r.HeadLen = next
			return r.framing(head)
		}
		if len(r.Fields) == maxCount {
			return respError(ReasonRespTooMany)
		}
		f, err := respField(line)
		if err != nil {
			return err
		}
		r.Fields = append(r.Fields, f)
	}
}

// respLine returns the line of b starting at pos without its CRLF, and where the next one
// starts. A line ending in a bare LF is refused; one not ended within maxBytes of the head's
// start is too large.
func respLine(b []byte, pos, maxBytes int) (line []byte, next int, err error) {
	end := min(len(b), maxBytes)
	for i := pos; i < end; i++ {
		if b[i] != '\n' {
			continue
		}
		if i == pos || b[i-1] != '\r' {
			return nil, 0, respError(ReasonRespBareLF)
		}
		return b[pos : i-1], i + 1, nil
	}
	if len(b) >= maxBytes {
		return nil, 0, respError(ReasonRespTooLarge)
	}
	return nil, 0, ErrIncomplete
}

// statusLine parses "HTTP/1.x SP 3DIGIT [SP reason]" (RFC 9112 section 4; a missing reason
// with its SP is accepted, as every client does).
func (r *Response) statusLine(l []byte) error {
	if len(l) < 12 || string(l[:5]) != "HTTP/" || l[8] != ' ' {
		return respError(ReasonRespStatusLine)
	}
	if string(l[5:8]) != "1.1" && string(l[5:8]) != "1.0" {
		return respError(ReasonRespVersion)
	}
	r.Minor = int(l[7] - '0')
	s := 0
	for _, c := range l[9:12] {
		if c < '0' || c > '9' {
			return respError(ReasonRespStatus)
		}
		s = s*10 + int(c-'0')
	}
	if s < 100 || s > 599 {
		return respError(ReasonRespStatus)
	}
	r.Status = s
	r.Reason = l[12:]
	if len(l) > 12 {
		if l[12] != ' ' {
			return respError(ReasonRespStatus)
		}
		r.Reason = l[13:]
		for _, c := range r.Reason {
			if !vchar[c] {
				return respError(ReasonRespStatusLine)
			}
		}
	}
	return nil
}

// respField parses "name: value" with a token name right before the colon and a value of
// field-value bytes around optional whitespace.
func respField(l []byte) (Field, error) {
	switch l[0] {
	case ' ', '\t':
		return Field{}, respError(ReasonRespObsFold)
	}
	i := 0
	for i < len(l) && tchar[l[i]] {
		i++
	}
	switch {
	case i == len(l):
		return Field{}, respError(ReasonRespFieldName)
	case l[i] == ' ' || l[i] == '\t':
		return Field{}, respError(ReasonRespSpaceColon)
	case l[i] != ':' || i == 0:
		return Field{}, respError(ReasonRespFieldName)
	}
	v := TrimOWS(l[i+1:])
	if !ValidFieldValue(v) {
		return Field{}, respError(ReasonRespFieldValue)
	}
	return Field{Name: l[:i], Value: v}, nil
}

// framing reads the fields that frame the body and decide the connection's persistence,
// and sets Framing, ContentLength, Chunked, KeepAlive and Upgrade (RFC 9112 sections 6.3
// and 9.3). One Content-Length at most, of digits only; Transfer-Encoding only as one
// "chunked", only in HTTP/1.1; with both, the body is chunked and the connection not reused.
func (r *Response) framing(head bool) error {
	var cl []byte
	var clSeen, te, closeTok, keepAlive bool
	r.Upgrade = false
	for _, f := range r.Fields {
		switch {
		case respFold(f.Name, "Content-Length"):
			if clSeen {
				return respError(ReasonRespDuplicateCL)
			}
			cl, clSeen = f.Value, true
		case respFold(f.Name, "Transfer-Encoding"):
			if te || !respFold(f.Value, "chunked") {
				return respError(ReasonRespTE)
			}
			te = true
		case respFold(f.Name, "Connection"):
			for tok := range respTokens(f.Value) {
				switch {
				case respFold(tok, "close"):
					closeTok = true
				case respFold(tok, "keep-alive"):
					keepAlive = true
				case respFold(tok, "upgrade"):
					r.Upgrade = true
				}
			}
		}
	}
	if te && r.Minor == 0 {
		return respError(ReasonRespTEHTTP10)
	}
	n := int64(-1)
	if clSeen {
		var ok bool
		if n, ok = respLength(cl); !ok {
			return respError(ReasonRespContentLength)
		}
	}
	if te {
		if err := r.checkTrailerAnnouncement(); err != nil {
			return err
		}
	}
	r.Chunked = te
	r.KeepAlive = !closeTok && (r.Minor == 1 || keepAlive) && (!te || !clSeen)
	noBody := head || r.Status < 200 || r.Status == http.StatusNoContent || r.Status == http.StatusNotModified
	switch {
	case noBody:
		r.Framing, r.ContentLength = FramingNone, 0
		if head {
			r.ContentLength = n
		}
	case te:
		r.Framing, r.ContentLength = FramingChunked, -1
	case clSeen:
		r.Framing, r.ContentLength = FramingLength, n
	default:
		r.Framing, r.ContentLength, r.KeepAlive = FramingClose, -1, false
	}
	return nil
}

// checkTrailerAnnouncement refuses a Trailer field of a chunked response that names a field
// that frames the message (net/http refuses it too) or is not a list of tokens.
func (r *Response) checkTrailerAnnouncement() error {
	for _, f := range r.Fields {
		if !respFold(f.Name, "Trailer") {
			continue
		}
		for tok := range respTokens(f.Value) {
			if !IsToken(tok) || respFold(tok, "Content-Length") || respFold(tok, "Transfer-Encoding") ||
				respFold(tok, "Trailer") {
				return respError(ReasonRespTrailerAnnounc)
			}
		}
	}
	return nil
}

// respLength parses a Content-Length value: 1*DIGIT within 63 bits.
func respLength(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' || n > (math.MaxInt64-int64(c-'0'))/10 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// respTokens yields the non-empty elements of a comma-separated list, their optional
// whitespace trimmed.
func respTokens(v []byte) func(yield func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for len(v) > 0 {
			i := 0
			for i < len(v) && v[i] != ',' {
				i++
			}
			if tok := TrimOWS(v[:i]); len(tok) > 0 && !yield(tok) {
				return
			}
			if i == len(v) {
				return
			}
			v = v[i+1:]
		}
	}
}

// respFold reports whether b equals the ASCII string s, ignoring ASCII case.
func respFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if c|0x20 != d|0x20 || (c|0x20) < 'a' || (c|0x20) > 'z' {
			if c != d {
				return false
			}
		}
	}
	return true
}

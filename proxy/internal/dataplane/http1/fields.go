package http1

// headState collects what a request's fields say about its framing, its Host and its
// connection while they are parsed; finish checks it once the head is whole, so that a
// malformed line later in the head is always the verdict, whatever the read sizes.
type headState struct {
	hosts, lengths, encodings, expects int
	host, length                       []byte
	chunked, expectBad, expect100      bool
	close, keepAlive, trailerBad       bool
}

// note records field f. Most names are none of those it looks for, and differ from them in
// length or in their first letter.
func (h *headState) note(f *Field) {
	if !framingInitial[f.Name[0]] {
		return
	}
	switch len(f.Name) {
	case len("host"):
		if asciiFold(f.Name, "host") {
			h.hosts++
			h.host = f.Value
		}
	case len("expect"):
		if asciiFold(f.Name, "expect") {
			h.noteExpect(f.Value)
		}
	case len("trailer"):
		if asciiFold(f.Name, "trailer") {
			h.trailerBad = h.trailerBad || announcesFraming(f.Value)
		}
	case len("connection"):
		if asciiFold(f.Name, "connection") {
			h.noteConnection(f.Value)
		}
	case len("content-length"):
		if asciiFold(f.Name, "content-length") {
			h.lengths++
			h.length = f.Value
		}
	case len("transfer-encoding"):
		if asciiFold(f.Name, "transfer-encoding") {
			h.encodings++
			h.chunked = asciiFold(f.Value, "chunked")
		}
	}
}

// framingInitial holds the first letters, in either case, of the names note looks for.
var framingInitial = func() (t [256]bool) {
	for _, c := range "hetcHETC" {
		t[c] = true
	}
	return t
}()

// noteExpect records an Expect field's value: an empty one expects nothing, "100-continue" is
// the only expectation known.
func (h *headState) noteExpect(v []byte) {
	if len(v) == 0 {
		return
	}
	h.expects++
	if asciiFold(v, "100-continue") {
		h.expect100 = true
	} else {
		h.expectBad = true
	}
}

// noteConnection records the connection options of a Connection field's value.
func (h *headState) noteConnection(v []byte) {
	for len(v) > 0 {
		var opt []byte
		opt, v = nextListElement(v)
		switch {
		case asciiFold(opt, "close"):
			h.close = true
		case asciiFold(opt, "keep-alive"):
			h.keepAlive = true
		}
	}
}

// announcesFraming reports whether a Trailer field's value names a field that frames the
// message, which net/http refuses (and RFC 9110 section 6.5.1 forbids in a trailer).
func announcesFraming(v []byte) bool {
	for len(v) > 0 {
		var name []byte
		name, v = nextListElement(v)
		if asciiFold(name, "transfer-encoding") || asciiFold(name, "content-length") ||
			asciiFold(name, "trailer") {
			return true
		}
	}
	return false
}

// finish checks the head as a whole and completes r from it.
func (h *headState) finish(r *Request) error {
	if err := h.framing(r); err != nil {
		return err
	}
	if err := h.authority(r); err != nil {
		return err
	}
	if h.expectBad || h.expects > 1 {
		return errExpectation
	}
	r.Expect100 = h.expect100 && r.Minor == 1
	r.KeepAlive = !h.close && (r.Minor == 1 || h.keepAlive)
	return nil
}

// framing checks Transfer-Encoding and Content-Length (RFC 9112 section 6) and sets r's.
func (h *headState) framing(r *Request) error {
	if h.encodings > 0 {
		switch {
		case r.Minor == 0:
			return errTEHTTP10
		case h.encodings > 1 || !h.chunked:
			return errTransferEncoding
		}
	}
	if h.lengths > 1 {
		return errDuplicateCL
	}
	if h.lengths == 1 {
		n, ok := parseContentLength(h.length)
		if !ok {
			return errContentLength
		}
		r.ContentLength = n
	}
	if h.encodings > 0 && h.lengths > 0 {
		return errCLWithTE
	}
	if h.encodings > 0 && h.trailerBad {
		return errTrailerName
	}
	r.Chunked = h.encodings > 0
	return nil
}

// authority checks the Host field (RFC 9112 section 3.2) and sets r.Host.
func (h *headState) authority(r *Request) error {
	switch {
	case h.hosts > 1:
		return errDuplicateHost
	case h.hosts == 0 && r.Minor == 1:
		return errMissingHost
	case h.hosts == 1 && len(h.host) > 0:
		if err := checkHost(h.host, false); err != nil {
			return err
		}
	}
	if r.Host == nil {
		r.Host = h.host
	}
	return nil
}

// parseContentLength parses 1*DIGIT into a non-negative int64, refusing an overflow.
func parseContentLength(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	for len(v) > 1 && v[0] == '0' {
		v = v[1:]
	}
	if len(v) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range v {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}

// nextListElement returns the first element of a comma-separated list, OWS trimmed, and the
// rest of the list after its comma.
func nextListElement(v []byte) (elem, rest []byte) {
	for i, c := range v {
		if c == ',' {
			return TrimOWS(v[:i]), v[i+1:]
		}
	}
	return TrimOWS(v), nil
}

// asciiFold reports whether b equals the lower-case ASCII string s, ignoring the case of b's
// letters.
func asciiFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
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

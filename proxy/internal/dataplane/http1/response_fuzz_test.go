package http1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"testing"
)

// responseSeeds are the response heads the fuzz corpus starts from: ordinary ones, the
// hostile suite's upstream cases and the smuggling families.
var responseSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n0\r\nX-T: 1\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
	"HTTP/1.1 200 OK\r\n\r\nclose-delimited",
	"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nContent-Length: 4\r\n\r\nbody",
	"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
	"HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding:  chunked \r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding:\tchunked\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: \x0bchunked\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1  200 OK\r\n\r\n",
	"HTTP/1.1 200\r\n\r\n",
	"HTTP/1.1 600 X\r\n\r\n",
	"HTTP/1.1 +20 X\r\n\r\n",
	"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n",
}

// FuzzResponseHead checks ParseResponse against http.ReadResponse on the same bytes, for a
// GET or HEAD request: what it accepts net/http accepts with the same status, version,
// fields (order and duplicates kept) and framing; a refusal of what net/http accepts has a
// reason the bytes show; and the verdict does not depend on where the bytes were cut.
func FuzzResponseHead(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, head bool) {
		lim := &Limits{MaxHeaderBytes: 4 << 10, MaxHeaderCount: 64}
		var r Response
		err := ParseResponse(in, head, &r, lim)
		checkSplits(t, in, head, lim, &r, err)
		if errors.Is(err, ErrIncomplete) {
			return
		}
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		theirs, nerr := readResponseHead(in, method)
		if nerr == nil {
			defer func() { _ = theirs.Body.Close() }()
		}
		if err != nil {
			if nerr == nil {
				explainRefusal(t, in, err)
			}
			return
		}
		if nerr != nil {
			t.Fatalf("accepted what net/http refuses (%v): %q", nerr, in)
		}
		compareResponse(t, in, &r, theirs)
	})
}

// readResponseHead reads the response head at the start of in with net/http, for a request
// of method; it sees only the bytes of in, so a head it finds longer than ours fails.
func readResponseHead(in []byte, method string) (*http.Response, error) {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(in)), &http.Request{Method: method})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// checkSplits checks that every prefix of in parses to ErrIncomplete or to what in does.
func checkSplits(t *testing.T, in []byte, head bool, lim *Limits, whole *Response, werr error) {
	t.Helper()
	step := max(1, len(in)/512)
	for k := 0; k < len(in); k += step {
		var r Response
		err := ParseResponse(in[:k], head, &r, lim)
		switch {
		case errors.Is(err, ErrIncomplete):
		case err == nil && werr == nil:
			if r.HeadLen != whole.HeadLen || r.Status != whole.Status || r.Framing != whole.Framing {
				t.Fatalf("prefix %d parses to another head than the whole: %q", k, in)
			}
		case err != nil && werr != nil:
			if err.Error() != werr.Error() {
				t.Fatalf("prefix %d: %v, whole: %v: %q", k, err, werr, in)
			}
		default:
			t.Fatalf("prefix %d: %v, whole: %v: %q", k, err, werr, in)
		}
	}
}

// compareResponse checks that net/http read the same response as r.
func compareResponse(t *testing.T, in []byte, r *Response, theirs *http.Response) {
	t.Helper()
	if theirs.StatusCode != r.Status || theirs.ProtoMinor != r.Minor || theirs.ProtoMajor != 1 {
		t.Fatalf("status %d HTTP/1.%d, net/http %d %s: %q", r.Status, r.Minor, theirs.StatusCode, theirs.Proto, in)
	}
	if theirs.ContentLength != r.ContentLength {
		t.Fatalf("length %d, net/http %d: %q", r.ContentLength, theirs.ContentLength, in)
	}
	if got := slices.Equal(theirs.TransferEncoding, []string{"chunked"}); got != r.Chunked {
		t.Fatalf("chunked %v, net/http %v: %q", r.Chunked, theirs.TransferEncoding, in)
	}
	noBody := theirs.Body == http.NoBody
	if ours := r.Framing == FramingNone || r.Framing == FramingLength && r.ContentLength == 0; noBody != ours {
		t.Fatalf("framing %d, net/http's body %T: %q", r.Framing, theirs.Body, in)
	}
	if r.Framing == FramingClose && !theirs.Close {
		t.Fatalf("close-delimited, net/http keeps the connection: %q", in)
	}
	if r.KeepAlive == theirs.Close && (!r.Chunked || !hasField(r, "Content-Length")) {
		t.Fatalf("keep-alive %v, net/http close %v: %q", r.KeepAlive, theirs.Close, in)
	}
	want := expectedHeader(r)
	fixPragma(want, theirs.Header)
	if !equalHeader(want, theirs.Header) {
		t.Fatalf("fields %q, net/http %q: %q", want, theirs.Header, in)
	}
	again, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(in[:r.HeadLen])), &http.Request{Method: theirs.Request.Method})
	if err != nil {
		t.Fatalf("net/http does not read the head in its %d bytes: %v: %q", r.HeadLen, err, in)
	}
	_ = again.Body.Close()
	if r.Framing == FramingLength && r.HeadLen+int(r.ContentLength) <= len(in) {
		body, _ := io.ReadAll(theirs.Body)
		if !bytes.Equal(body, in[r.HeadLen:r.HeadLen+int(r.ContentLength)]) {
			t.Fatalf("net/http's body %q differs: %q", body, in)
		}
	}
}

// expectedHeader is r's fields as net/http's Header holds them: canonical names, values in
// order, without the fields net/http moves elsewhere (Transfer-Encoding, and for a chunked
// body Content-Length and Trailer) or drops (Connection listing close in HTTP/1.1).
func expectedHeader(r *Response) http.Header {
	h := http.Header{}
	closes := false
	for _, f := range r.Fields {
		if respFold(f.Name, "Connection") {
			for tok := range respTokens(f.Value) {
				closes = closes || respFold(tok, "close")
			}
		}
	}
	for _, f := range r.Fields {
		k := textproto.CanonicalMIMEHeaderKey(string(f.Name))
		switch {
		case k == "Transfer-Encoding",
			r.Chunked && k == "Trailer",
			r.Chunked && k == "Content-Length" && r.Framing == FramingChunked,
			r.Minor == 1 && closes && k == "Connection":
			continue
		}
		h[k] = append(h[k], string(f.Value))
	}
	return h
}

// fixPragma adds what net/http adds for a Pragma: no-cache without Cache-Control.
func fixPragma(want, theirs http.Header) {
	if _, ok := want["Cache-Control"]; !ok && len(want["Pragma"]) > 0 && want["Pragma"][0] == "no-cache" {
		want["Cache-Control"] = theirs["Cache-Control"]
	}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, vs := range a {
		if !slices.Equal(vs, b[k]) {
			return false
		}
	}
	return true
}

func hasField(r *Response, name string) bool {
	for _, f := range r.Fields {
		if respFold(f.Name, name) {
			return true
		}
	}
	return false
}

// explainRefusal fails unless a refusal of what net/http accepts has a reason the bytes show.
func explainRefusal(t *testing.T, in []byte, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("refused with %v: %q", err, in)
	}
	head := in
	if i := bytes.Index(in, []byte("\n\r\n")); i >= 0 {
		head = in[:i+3]
	}
	s := string(head)
	ok := false
	switch e.Reason {
	case ReasonRespBareLF:
		ok = hasBareLF(head)
	case ReasonRespObsFold:
		ok = strings.Contains(s, "\n ") || strings.Contains(s, "\n\t")
	case ReasonRespSpaceColon:
		ok = spaceInName(s)
	case ReasonRespDuplicateCL:
		ok = strings.Count(strings.ToLower(s), "\ncontent-length:") > 1
	case ReasonRespContentLength, ReasonRespTEHTTP10, ReasonRespTrailerAnnounc, ReasonRespTE:
		ok = strings.Contains(strings.ToLower(s), "content-length") || strings.Contains(strings.ToLower(s), "transfer-encoding") ||
			strings.Contains(strings.ToLower(s), "trailer")
	case ReasonRespStatus, ReasonRespVersion, ReasonRespStatusLine:
		line, _, _ := strings.Cut(s, "\n")
		ok = !statusLineLike(line)
	case ReasonRespFieldValue:
		ok = bytes.ContainsAny(head, "\r\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f\x7f")
	case ReasonRespFieldName, ReasonRespTooLarge, ReasonRespTooMany:
		ok = true
	}
	if !ok {
		t.Fatalf("refused (%s) what net/http accepts, and the bytes do not show why: %q", e.Reason, in)
	}
}

// hasBareLF reports a LF not preceded by a CR.
func hasBareLF(b []byte) bool {
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			return true
		}
	}
	return false
}

// statusLineLike reports a line that is "HTTP/1.x NNN" with N 1-5 first, then optionally SP
// and printable bytes.
func statusLineLike(line string) bool {
	line = strings.TrimSuffix(line, "\r")
	if len(line) < 12 || (line[:9] != "HTTP/1.1 " && line[:9] != "HTTP/1.0 ") || line[9] < '1' || line[9] > '5' ||
		line[10] < '0' || line[10] > '9' || line[11] < '0' || line[11] > '9' {
		return false
	}
	if len(line) == 12 {
		return true
	}
	if line[12] != ' ' {
		return false
	}
	for i := 13; i < len(line); i++ {
		if !vchar[line[i]] {
			return false
		}
	}
	return true
}

// spaceInName reports a field line whose name, before its colon, holds SP or HTAB.
func spaceInName(head string) bool {
	lines := strings.Split(head, "\n")
	for _, l := range lines[1:] {
		if name, _, ok := strings.Cut(l, ":"); ok && strings.ContainsAny(name, " \t") {
			return true
		}
	}
	return false
}

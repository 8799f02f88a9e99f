package http1

import (
	"errors"
	"strings"
	"testing"
)

// refusal is a head ParseRequest must refuse, with the status and reason it must give.
type refusal struct {
	name, raw string
	status    int
	reason    string
}

// refusals lists a case for every refusal of ParseRequest.
var refusals = []refusal{
	{"a bare LF ends the request line", "GET / HTTP/1.1\nHost: x\r\n\r\n", 400, ReasonBareLF},
	{"a bare LF ends a field line", "GET / HTTP/1.1\r\nHost: x\n\r\n", 400, ReasonBareLF},
	{"a bare LF ends the head", "GET / HTTP/1.1\r\nHost: x\r\n\n", 400, ReasonBareLF},
	{"a bare CR in the request line", "GET /\r HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonBareCR},
	{"a bare CR before CRLF in a value", "GET / HTTP/1.1\r\nHost: x\r\nX: a\r\r\n\r\n", 400, ReasonBareCR},
	{"a bare CR inside a value", "GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n", 400, ReasonBareCR},
	{"a bare CR in a field name", "GET / HTTP/1.1\r\nHost: x\r\nX\rY: a\r\n\r\n", 400, ReasonBareCR},
	{"an empty line before the request line", "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonEmptyLine},
	{"a request line of two words", "GET /\r\nHost: x\r\n\r\n", 400, ReasonRequestLine},
	{"two spaces after the method", "GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonRequestLine},
	{"an empty target", "CONNECT  HTTP/1.0\r\n\r\n", 400, ReasonRequestLine},
	{"a space before the method", " GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonRequestLine},
	{"a space at the end of the request line", "GET / HTTP/1.1 \r\nHost: x\r\n\r\n", 400, ReasonVersion},
	{"a tab between the request line's words", "GET\t/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonMethod},
	{"a method that is not a token", "G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonMethod},
	{"a lower-case method", "delete / HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonMethodCase},
	{"a method of mixed case", "Get / HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonMethodCase},
	{"a lower-case connect", "connect x:80 HTTP/1.1\r\nHost: x:80\r\n\r\n", 400, ReasonMethodCase},
	{"a lower-case version", "GET / http/1.1\r\nHost: x\r\n\r\n", 400, ReasonVersion},
	{"HTTP/1.2", "GET / HTTP/1.2\r\nHost: x\r\n\r\n", 505, ReasonUnsupportedVersion},
	{"HTTP/2.0", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, ReasonUnsupportedVersion},
	{"a target that is not a form", "GET x HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonTarget},
	{"an authority-form target outside CONNECT", "GET x:80 HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonTarget},
	{"an origin-form target for CONNECT", "CONNECT /x HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonTarget},
	{"a CONNECT authority without a port", "CONNECT internal HTTP/1.1\r\nHost: internal\r\n\r\n", 400, ReasonHost},
	{"the asterisk outside OPTIONS", "GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonTarget},
	{"an absolute-form target of another scheme", "GET ftp://x/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonTarget},
	{"an absolute-form target without an authority", "GET http:///p HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonHost},
	{"an absolute-form target of the scheme alone", "GET http:// HTTP/1.0\r\n\r\n", 400, ReasonHost},
	{"userinfo in an absolute-form target", "GET http://user:secret@x/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonUserinfo},
	{"a fragment in the target", "GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonTarget},
	{"a malformed percent escape", "GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonTarget},
	{"a truncated percent escape in the query", "GET /a?b=% HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonTarget},
	{"a NUL in the target", "GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonTarget},
	{"a non-ASCII byte in the target", "GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonTarget},
	{"obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", 400, ReasonObsFold},
	{"whitespace before the first field", "GET / HTTP/1.1\r\n Host: x\r\n\r\n", 400, ReasonObsFold},
	{"a space before the colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, ReasonSpaceBeforeColon},
	{"a tab before the colon", "GET / HTTP/1.1\r\nHost\t: x\r\n\r\n", 400, ReasonSpaceBeforeColon},
	{"a field name with a space", "GET / HTTP/1.1\r\nHost: x\r\nX Bad: 1\r\n\r\n", 400, ReasonSpaceBeforeColon},
	{"a field name that is not a token", "GET / HTTP/1.1\r\nHost: x\r\nX(: 1\r\n\r\n", 400, ReasonFieldName},
	{"a field line without a colon", "GET / HTTP/1.1\r\nHost: x\r\nXY\r\n\r\n", 400, ReasonFieldName},
	{"an empty field name", "GET / HTTP/1.1\r\nHost: x\r\n: 1\r\n\r\n", 400, ReasonFieldName},
	{"a NUL in a value", "GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", 400, ReasonFieldValue},
	{"a DEL in a value", "GET / HTTP/1.1\r\nHost: x\r\nX: a\x7fb\r\n\r\n", 400, ReasonFieldValue},
	{"a vertical tab in a value", "GET / HTTP/1.1\r\nHost: x\r\nX: \va\r\n\r\n", 400, ReasonFieldValue},
	{"HTTP/1.1 without Host", "GET / HTTP/1.1\r\nX: 1\r\n\r\n", 400, ReasonMissingHost},
	{"HTTP/1.1 absolute-form without Host", "GET http://x/ HTTP/1.1\r\n\r\n", 400, ReasonMissingHost},
	{"two Host fields", "GET / HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n", 400, ReasonDuplicateHost},
	{"two Host fields in HTTP/1.0", "GET / HTTP/1.0\r\nHost: x\r\nhost: y\r\n\r\n", 400, ReasonDuplicateHost},
	{"an @ in Host", "GET / HTTP/1.1\r\nHost: evil@x\r\n\r\n", 400, ReasonUserinfo},
	{"a Host with a path", "GET / HTTP/1.1\r\nHost: x/y\r\n\r\n", 400, ReasonHost},
	{"a Host with a space", "GET / HTTP/1.1\r\nHost: x y\r\n\r\n", 400, ReasonHost},
	{"a Host with a port that is not digits", "GET / HTTP/1.1\r\nHost: x:8o\r\n\r\n", 400, ReasonHost},
	{"a Host with two colons", "GET / HTTP/1.1\r\nHost: x:80:80\r\n\r\n", 400, ReasonHost},
	{"a Host with a percent escape", "GET / HTTP/1.1\r\nHost: %78\r\n\r\n", 400, ReasonHost},
	{"a Host of a port alone", "GET / HTTP/1.1\r\nHost: :80\r\n\r\n", 400, ReasonHost},
	{"a Host with an unclosed IP-literal", "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", 400, ReasonHost},
	{"a Host with an invalid IPv6 literal", "GET / HTTP/1.1\r\nHost: [1::2::3]\r\n\r\n", 400, ReasonHost},
	{"a Host with an IPv4 address in brackets", "GET / HTTP/1.1\r\nHost: [10.0.0.1]\r\n\r\n", 400, ReasonHost},
	{"a Host with an IPv6 zone", "GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n", 400, ReasonHost},
	{"a Content-Length that is not digits", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\n", 400, ReasonContentLength},
	{"a Content-Length with a plus sign", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n", 400, ReasonContentLength},
	{"a negative Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400, ReasonContentLength},
	{"an empty Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n", 400, ReasonContentLength},
	{"a Content-Length list", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nabcde", 400, ReasonContentLength},
	{"a Content-Length over int64", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775808\r\n\r\n", 400, ReasonContentLength},
	{"a Content-Length of twenty digits", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551621\r\n\r\n", 400, ReasonContentLength},
	{"two different Content-Lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde", 400, ReasonDuplicateContentLength},
	{"two equal Content-Lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nabcde", 400, ReasonDuplicateContentLength},
	{"a Transfer-Encoding other than chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, ReasonTransferEncoding},
	{"a coding list ending in chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, ReasonTransferEncoding},
	{"chunked then identity", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 501, ReasonTransferEncoding},
	{"xchunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n", 501, ReasonTransferEncoding},
	{"chunked behind a vertical tab", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \vchunked\r\n\r\n", 400, ReasonFieldValue},
	{"two Transfer-Encoding fields", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501, ReasonTransferEncoding},
	{"Transfer-Encoding in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, ReasonTransferEncodingHTTP10},
	{"Content-Length with Transfer-Encoding", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400, ReasonContentLengthWithTransferEncoding},
	{"a Trailer announcing Content-Length in a chunked request", "POST / HTTP/1.1\r\nHost: x\r\nTrailer: a, content-length\r\nTransfer-Encoding: chunked\r\n\r\n", 400, ReasonTrailerName},
	{"an expectation other than 100-continue", "PUT / HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n", 417, ReasonExpectation},
	{"100-continue in a list", "PUT / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue, foo\r\n\r\n", 417, ReasonExpectation},
	{"two Expect fields", "PUT / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nExpect: 100-continue\r\n\r\n", 417, ReasonExpectation},
	{"an expectation in HTTP/1.0", "PUT / HTTP/1.0\r\nExpect: foo\r\n\r\n", 417, ReasonExpectation},
	{"more fields than the limit", "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Many: 1\r\n", 100) + "\r\n", 431, ReasonTooManyFields},
	{"a head over the limit", "GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", DefaultMaxHeaderBytes) + "\r\n\r\n", 431, ReasonHeadTooLarge},
	{"a request line over the limit", "GET /" + strings.Repeat("a", DefaultMaxRequestLine) + " HTTP/1.1\r\nHost: x\r\n\r\n", 414, ReasonRequestLineTooLong},
}

// Tests that ParseRequest refuses each malformed, ambiguous or oversized head with its status
// and reason, whole and fed one byte more at a time.
func TestParseRequestRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r Request
			err := ParseRequest([]byte(tc.raw), &r, nil)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("ParseRequest = %v, want a refusal", err)
			}
			if e.Status != tc.status || e.Reason != tc.reason {
				t.Errorf("refused %d %s, want %d %s", e.Status, e.Reason, tc.status, tc.reason)
			}
			for n := range min(len(tc.raw), 4096) {
				err := ParseRequest([]byte(tc.raw[:n]), &r, nil)
				if err != nil && !errors.Is(err, ErrIncomplete) && !errors.Is(err, e) {
					t.Fatalf("ParseRequest(first %d bytes) = %v, want %v or ErrIncomplete", n, err, e)
				}
			}
		})
	}
}

// Tests that a head passing a limit is refused as soon as it passes, not when it ends.
func TestParseRequestRefusesOversizedPartialHeads(t *testing.T) {
	t.Parallel()
	lim := &Limits{MaxHeaderBytes: 64, MaxHeaderCount: 2, MaxRequestLine: 20}
	tests := []struct {
		name, raw string
		want      *Error
	}{
		{"a request line one byte over its limit with no end yet", "GET /" + strings.Repeat("a", 17), errRequestLineLong},
		{"a head one byte over its limit with no end yet", "GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 64-28+1), errHeadTooLarge},
		{"a third field line as soon as it starts", "GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB", errTooManyFields},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r Request
			if err := ParseRequest([]byte(tc.raw[:len(tc.raw)-1]), &r, lim); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("one byte short: %v, want ErrIncomplete", err)
			}
			if err := ParseRequest([]byte(tc.raw), &r, lim); !errors.Is(err, tc.want) {
				t.Fatalf("ParseRequest = %v, want %v", err, tc.want)
			}
		})
	}
}

// Tests that a head exactly at each limit is accepted.
func TestParseRequestAcceptsHeadsAtTheLimits(t *testing.T) {
	t.Parallel()
	lim := &Limits{MaxHeaderBytes: 64, MaxHeaderCount: 2, MaxRequestLine: 20}
	line := "GET /" + strings.Repeat("a", 6) + " HTTP/1.1\r\n" // 20 bytes before CRLF
	head := line + "Host: x\r\nX: " + strings.Repeat("a", 64-len(line)-9-3-4) + "\r\n\r\n"
	var r Request
	if err := ParseRequest([]byte(head), &r, lim); err != nil || len(head) != 64 {
		t.Fatalf("ParseRequest(%d bytes) = %v", len(head), err)
	}
	longer := strings.Replace(head, "X: ", "X: a", 1)
	if err := ParseRequest([]byte(longer), &r, lim); !errors.Is(err, errHeadTooLarge) {
		t.Fatalf("one byte more: %v", err)
	}
}

// Tests that the verdict on a head passing MaxHeaderBytes depends only on its bytes within
// the limit: a fault before it is the verdict, one after it is not seen.
func TestParseRequestLooksNoFurtherThanTheLimit(t *testing.T) {
	t.Parallel()
	lim := &Limits{MaxHeaderBytes: 64}
	head := "GET / HTTP/1.1\r\nHost: x\r\nX: " // 28 bytes
	tests := []struct {
		name, raw string
		want      *Error
	}{
		{"a NUL within the limit, the head going on past it", head + "a\x00" + strings.Repeat("a", 60), errFieldValue},
		{"a NUL past the limit", head + strings.Repeat("a", 40) + "\x00\r\n\r\n", errHeadTooLarge},
		{"a bare LF past the limit", head + strings.Repeat("a", 40) + "\n\r\n", errHeadTooLarge},
		{"a head that ends one byte past the limit", head + strings.Repeat("a", 33) + "\r\n\r\n", errHeadTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r Request
			for n := 1; n <= len(tc.raw); n++ {
				err := ParseRequest([]byte(tc.raw[:n]), &r, lim)
				if !errors.Is(err, ErrIncomplete) && !errors.Is(err, tc.want) {
					t.Fatalf("first %d bytes: %v, want %v or ErrIncomplete", n, err, tc.want)
				}
			}
			if err := ParseRequest([]byte(tc.raw), &r, lim); !errors.Is(err, tc.want) {
				t.Fatalf("ParseRequest = %v, want %v", err, tc.want)
			}
		})
	}
}

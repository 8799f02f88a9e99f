package http1

import (
	"errors"
	"testing"
)

// Tests that ParseResponse frames a response as RFC 9112 section 6.3 says, given the method.
func TestParseResponseFraming(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		head      bool
		in        string
		status    int
		framing   Framing
		length    int64
		keepAlive bool
	}{
		{"a length", false, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, FramingLength, 5, true},
		{"a zero length", false, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, FramingLength, 0, true},
		{"chunked", false, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 200, FramingChunked, -1, true},
		{"chunked in any case", false, "HTTP/1.1 200 OK\r\ntransfer-encoding: CHUNKED\r\n\r\n", 200, FramingChunked, -1, true},
		{"chunked and a length: chunked, not reused", false, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 200, FramingChunked, -1, false},
		{"neither: close-delimited", false, "HTTP/1.1 200 OK\r\n\r\n", 200, FramingClose, -1, false},
		{"HTTP/1.0 without keep-alive", false, "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", 200, FramingLength, 1, false},
		{"HTTP/1.0 with keep-alive", false, "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\n", 200, FramingLength, 1, true},
		{"Connection: close", false, "HTTP/1.1 200 OK\r\nConnection: foo, close\r\nContent-Length: 1\r\n\r\n", 200, FramingLength, 1, false},
		{"HEAD with a length", true, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", 200, FramingNone, 100, true},
		{"HEAD without a length", true, "HTTP/1.1 200 OK\r\n\r\n", 200, FramingNone, -1, true},
		{"HEAD chunked", true, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 200, FramingNone, -1, true},
		{"204 with a length", false, "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", 204, FramingNone, 0, true},
		{"304 chunked", false, "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", 304, FramingNone, 0, true},
		{"103", false, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", 103, FramingNone, 0, true},
		{"no reason phrase", false, "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", 200, FramingLength, 0, true},
		{"an empty reason phrase", false, "HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n", 404, FramingLength, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var r Response
			if err := ParseResponse([]byte(tt.in), tt.head, &r, nil); err != nil {
				t.Fatalf("ParseResponse: %v", err)
			}
			if r.Status != tt.status || r.Framing != tt.framing || r.ContentLength != tt.length || r.KeepAlive != tt.keepAlive {
				t.Errorf("got status %d framing %d length %d keep-alive %v, want %d %d %d %v",
					r.Status, r.Framing, r.ContentLength, r.KeepAlive, tt.status, tt.framing, tt.length, tt.keepAlive)
			}
		})
	}
}

// Tests that ParseResponse refuses the heads it must, each with its reason.
func TestParseResponseRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, reason string }{
		{"bare LF ending the status line", "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", ReasonRespBareLF},
		{"bare LF ending a field", "HTTP/1.1 200 OK\r\nContent-Length: 0\n\r\n", ReasonRespBareLF},
		{"bare LF ending the head", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\n", ReasonRespBareLF},
		{"bare CR in a value", "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", ReasonRespFieldValue},
		{"NUL in a value", "HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n", ReasonRespFieldValue},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", ReasonRespObsFold},
		{"whitespace before the colon", "HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\nx", ReasonRespSpaceColon},
		{"a name that is no token", "HTTP/1.1 200 OK\r\nX(y): 1\r\n\r\n", ReasonRespFieldName},
		{"no colon", "HTTP/1.1 200 OK\r\nXy\r\n\r\n", ReasonRespFieldName},
		{"an empty name", "HTTP/1.1 200 OK\r\n: y\r\n\r\n", ReasonRespFieldName},
		{"duplicate equal lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", ReasonRespDuplicateCL},
		{"differing lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx", ReasonRespDuplicateCL},
		{"a length list", "HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\nx", ReasonRespContentLength},
		{"a signed length", "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx", ReasonRespContentLength},
		{"an empty length", "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", ReasonRespContentLength},
		{"a length overflowing", "HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\n", ReasonRespContentLength},
		{"an invalid length on a 304", "HTTP/1.1 304 Not Modified\r\nContent-Length: x\r\n\r\n", ReasonRespContentLength},
		{"gzip, chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", ReasonRespTE},
		{"two chunked fields", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", ReasonRespTE},
		{"xchunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n", ReasonRespTE},
		{"chunked in HTTP/1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", ReasonRespTEHTTP10},
		{"a trailer announcing Content-Length", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n", ReasonRespTrailerAnnounc},
		{"HTTP/2.0", "HTTP/2.0 200 OK\r\n\r\n", ReasonRespVersion},
		{"HTTP/1.2", "HTTP/1.2 200 OK\r\n\r\n", ReasonRespVersion},
		{"lower-case http", "http/1.1 200 OK\r\n\r\n", ReasonRespStatusLine},
		{"two digits", "HTTP/1.1 20 OK\r\n\r\n", ReasonRespStatus},
		{"four digits", "HTTP/1.1 2000 OK\r\n\r\n", ReasonRespStatus},
		{"a status under 100", "HTTP/1.1 099 OK\r\n\r\n", ReasonRespStatus},
		{"a status over 599", "HTTP/1.1 600 OK\r\n\r\n", ReasonRespStatus},
		{"two spaces before the status", "HTTP/1.1  200 OK\r\n\r\n", ReasonRespStatus},
		{"a control byte in the reason", "HTTP/1.1 200 O\x01K\r\n\r\n", ReasonRespStatusLine},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var r Response
			err := ParseResponse([]byte(tt.in), false, &r, nil)
			var e *Error
			if !errors.As(err, &e) || e.Reason != tt.reason || e.Status != 502 {
				t.Fatalf("ParseResponse = %v, want a 502 %s", err, tt.reason)
			}
		})
	}
}

// Tests that ParseResponse enforces the head limits and asks for more bytes short of them.
func TestParseResponseLimits(t *testing.T) {
	t.Parallel()
	var r Response
	lim := &Limits{MaxHeaderBytes: 64, MaxHeaderCount: 2}
	if err := ParseResponse([]byte("HTTP/1.1 200 OK\r\nA: b\r\n"), false, &r, lim); !errors.Is(err, ErrIncomplete) {
		t.Errorf("a head cut short: %v, want ErrIncomplete", err)
	}
	long := "HTTP/1.1 200 OK\r\nA: " + string(make([]byte, 60)) + "\r\n\r\n"
	if err := ParseResponse([]byte(long), false, &r, lim); !isReason(err, ReasonRespTooLarge) {
		t.Errorf("a head over 64 bytes: %v, want %s", err, ReasonRespTooLarge)
	}
	if err := ParseResponse([]byte("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"), false, &r, lim); !isReason(err, ReasonRespTooMany) {
		t.Errorf("three fields: %v, want %s", err, ReasonRespTooMany)
	}
	if err := ParseResponse([]byte("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\n\r\n"), false, &r, lim); err != nil {
		t.Errorf("two fields: %v", err)
	}
}

// Tests that parsing a head allocates nothing once the field array is large enough.
func TestParseResponseAllocations(t *testing.T) {
	in := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: keep-alive\r\nX-A: 1\r\n\r\nhello")
	r := Response{Fields: make([]Field, 0, 8)}
	allocs := testing.AllocsPerRun(100, func() {
		if err := ParseResponse(in, false, &r, nil); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per parse, want 0", allocs)
	}
}

func isReason(err error, reason string) bool {
	var e *Error
	return errors.As(err, &e) && e.Reason == reason
}

// BenchmarkParseResponse measures a typical backend response head.
func BenchmarkParseResponse(b *testing.B) {
	in := []byte("HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Wed, 02 Dec 2026 06:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 100\r\nConnection: keep-alive\r\nCache-Control: no-cache\r\nX-Request-Id: 0123456789abcdef\r\n\r\n")
	r := Response{Fields: make([]Field, 0, 16)}
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseResponse(in, false, &r, nil); err != nil {
			b.Fatal(err)
		}
	}
}

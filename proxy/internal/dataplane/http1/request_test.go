package http1

import (
	"bufio"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// parsed is what a test compares of a parsed Request, as strings.
type parsed struct {
	Method, Target, Host string
	Minor                int
	Fields               []string
	ContentLength        int64
	Chunked, KeepAlive   bool
	Expect100            bool
	HeadLen              int // the raw head's length, filled in by the test
}

func summary(r *Request) parsed {
	p := parsed{
		Method: string(r.Method), Target: string(r.Target), Host: string(r.Host), Minor: r.Minor,
		ContentLength: r.ContentLength, Chunked: r.Chunked, KeepAlive: r.KeepAlive,
		Expect100: r.Expect100, HeadLen: r.HeadLen,
	}
	for _, f := range r.Fields {
		p.Fields = append(p.Fields, string(f.Name)+"="+string(f.Value))
	}
	return p
}

// Tests what ParseRequest accepts and what it makes of it.
func TestParseRequestAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, raw string
		want      parsed
	}{
		{
			"an origin-form GET keeps its fields in order with duplicates", "GET /a?b=c HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nx-a:  2 \r\n\r\n",
			parsed{"GET", "/a?b=c", "x", 1, []string{"Host=x", "X-A=1", "x-a=2"}, -1, false, true, false, 0},
		},
		{
			"an absolute-form target gives the Host, whatever the Host field says", "GET http://routed.example:8080/p HTTP/1.1\r\nHost: other\r\n\r\n",
			parsed{"GET", "http://routed.example:8080/p", "routed.example:8080", 1, []string{"Host=other"}, -1, false, true, false, 0},
		},
		{
			"an absolute-form https target without a path", "GET HTTPS://x?q HTTP/1.1\r\nHost: x\r\n\r\n",
			parsed{"GET", "HTTPS://x?q", "x", 1, []string{"Host=x"}, -1, false, true, false, 0},
		},
		{
			"OPTIONS may have the asterisk target", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
			parsed{"OPTIONS", "*", "x", 1, []string{"Host=x"}, -1, false, true, false, 0},
		},
		{
			"CONNECT is parsed with its authority, the verdict left to the handler", "CONNECT internal:22 HTTP/1.1\r\nHost: internal:22\r\n\r\n",
			parsed{"CONNECT", "internal:22", "internal:22", 1, []string{"Host=internal:22"}, -1, false, true, false, 0},
		},
		{
			"HTTP/1.0 without Host closes by default", "GET / HTTP/1.0\r\n\r\n",
			parsed{"GET", "/", "", 0, nil, -1, false, false, false, 0},
		},
		{
			"HTTP/1.0 with keep-alive persists", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
			parsed{"GET", "/", "", 0, []string{"Connection=Keep-Alive"}, -1, false, true, false, 0},
		},
		{
			"HTTP/1.1 with close in a list closes", "GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, CLOSE\r\n\r\n",
			parsed{"GET", "/", "x", 1, []string{"Host=x", "Connection=foo, CLOSE"}, -1, false, false, false, 0},
		},
		{
			"a Content-Length with leading zeros", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 007\r\n\r\n",
			parsed{"POST", "/", "x", 1, []string{"Host=x", "Content-Length=007"}, 7, false, true, false, 0},
		},
		{
			"the largest Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775807\r\n\r\n",
			parsed{"POST", "/", "x", 1, []string{"Host=x", "Content-Length=9223372036854775807"}, 1<<63 - 1, false, true, false, 0},
		},
		{
			"chunked in any case", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n",
			parsed{"POST", "/", "x", 1, []string{"Host=x", "Transfer-Encoding=Chunked"}, -1, true, true, false, 0},
		},
		{
			"Expect: 100-continue is noted in HTTP/1.1", "PUT / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n",
			parsed{"PUT", "/", "x", 1, []string{"Host=x", "Expect=100-Continue", "Content-Length=1"}, 1, false, true, true, 0},
		},
		{
			"Expect: 100-continue is ignored in HTTP/1.0", "PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n",
			parsed{"PUT", "/", "", 0, []string{"Expect=100-continue"}, -1, false, false, false, 0},
		},
		{
			"an empty Host and an empty value", "GET / HTTP/1.1\r\nHost:\r\nX:\t\r\n\r\n",
			parsed{"GET", "/", "", 1, []string{"Host=", "X="}, -1, false, true, false, 0},
		},
		{
			"an IPv6 literal Host with a port", "GET / HTTP/1.1\r\nHost: [::ffff:10.0.0.1]:80\r\n\r\n",
			parsed{"GET", "/", "[::ffff:10.0.0.1]:80", 1, []string{"Host=[::ffff:10.0.0.1]:80"}, -1, false, true, false, 0},
		},
		{
			"obs-text and escapes pass in values and targets", "GET /%C3%A9?{a}|b HTTP/1.1\r\nHost: x\r\nX: caf\xc3\xa9 \"q\"\r\n\r\n",
			parsed{"GET", "/%C3%A9?{a}|b", "x", 1, []string{"Host=x", "X=caf\xc3\xa9 \"q\""}, -1, false, true, false, 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r Request
			raw := tc.raw + "BODY"
			if err := ParseRequest([]byte(raw), &r, nil); err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			tc.want.HeadLen = len(tc.raw)
			if diff := cmp.Diff(tc.want, summary(&r)); diff != "" {
				t.Errorf("parsed (-want +got):\n%s", diff)
			}
			if got := raw[r.HeadLen:]; got != "BODY" {
				t.Errorf("body starts at %q", got)
			}
		})
	}
}

// Tests that ParseRequest asks for more bytes, without a verdict, while a head is incomplete
// and within the limits.
func TestParseRequestIncomplete(t *testing.T) {
	t.Parallel()
	raw := "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n"
	var r Request
	for n := range len(raw) {
		if err := ParseRequest([]byte(raw[:n]), &r, nil); !errors.Is(err, ErrIncomplete) {
			t.Fatalf("ParseRequest(%q) = %v, want ErrIncomplete", raw[:n], err)
		}
	}
	if err := ParseRequest([]byte(raw), &r, nil); err != nil || r.HeadLen != len(raw) {
		t.Fatalf("ParseRequest(whole) = %v, HeadLen %d", err, r.HeadLen)
	}
}

// Tests that parsing into a reused Request allocates nothing.
func TestParseRequestAllocatesNothing(t *testing.T) {
	raw := []byte(benchHead)
	refused := []byte("GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n")
	var r Request
	if err := ParseRequest(raw, &r, nil); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		_ = ParseRequest(raw, &r, nil)
		_ = ParseRequest(refused, &r, nil)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per parse, want 0", allocs)
	}
}

// benchHead is a browser-like head of ten fields.
var benchHead = "GET /api/v1/items?page=2&sort=name HTTP/1.1\r\n" +
	"Host: shop.example.com\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n" +
	"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n" +
	"Accept-Language: en-US,en;q=0.5\r\n" +
	"Accept-Encoding: gzip, deflate, br\r\n" +
	"Referer: https://shop.example.com/\r\n" +
	"Cookie: session=4f2a9c0d1e; theme=dark\r\n" +
	"Connection: keep-alive\r\n" +
	"Cache-Control: max-age=0\r\n" +
	"X-Request-Id: 7d9f3c2a-5b1e-4c8d-9a6f-2e4b8c1d0f3a\r\n" +
	"\r\n"

// BenchmarkParseRequest parses benchHead into a reused Request: the target is 300 ns or less
// and no allocation.
func BenchmarkParseRequest(b *testing.B) {
	raw := []byte(benchHead)
	var r Request
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseRequest(raw, &r, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadRequestNetHTTP reads benchHead with http.ReadRequest, for a figure from the same
// run to set BenchmarkParseRequest's beside.
func BenchmarkReadRequestNetHTTP(b *testing.B) {
	src := strings.NewReader(benchHead)
	br := bufio.NewReader(src)
	b.SetBytes(int64(len(benchHead)))
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(benchHead)
		br.Reset(src)
		if _, err := http.ReadRequest(br); err != nil {
			b.Fatal(err)
		}
	}
}

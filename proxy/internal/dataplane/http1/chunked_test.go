package http1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http/httputil"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

// decoded is what a chunked body decodes to: payload, trailers as "Name=value", and the bytes
// left after it.
type decoded struct {
	Payload  string
	Trailers []string
	Rest     string
}

// decodeChunked decodes in with a ChunkedReader over a 4 KiB bufio.Reader of src, and returns
// the result and the error that ended the body (nil for io.EOF).
func decodeChunked(in string, src func(io.Reader) io.Reader) (decoded, error) {
	under := strings.NewReader(in)
	br := bufio.NewReader(src(under))
	var c ChunkedReader
	c.Reset(br, nil)
	payload, err := io.ReadAll(&c)
	d := decoded{Payload: string(payload)}
	for _, f := range c.Trailers() {
		d.Trailers = append(d.Trailers, string(f.Name)+"="+string(f.Value))
	}
	rest, _ := io.ReadAll(br)
	d.Rest = string(rest)
	return d, err
}

func identity(r io.Reader) io.Reader { return r }

// Tests what the ChunkedReader decodes, whole and one byte per read.
func TestChunkedReaderDecodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     decoded
	}{
		{"chunks and an empty trailer section", "3\r\nabc\r\n1\r\nd\r\n0\r\n\r\nNEXT", decoded{"abcd", nil, "NEXT"}},
		{"only the last chunk", "0\r\n\r\n", decoded{"", nil, ""}},
		{"upper and lower case hexadecimal", "A\r\n0123456789\r\nf\r\n0123456789abcde\r\n0\r\n\r\n", decoded{"0123456789" + "0123456789abcde", nil, ""}},
		{"leading zeros up to fifteen digits", "000000000000003\r\nabc\r\n0\r\n\r\n", decoded{"abc", nil, ""}},
		{"extensions with token and quoted values", "3;a=b ; c = \"d;\\\"e\" ;f\r\nabc\r\n0;last\r\n\r\n", decoded{"abc", nil, ""}},
		{"trailers kept in order", "1\r\nx\r\n0\r\nX-Sum: 1\r\nx-sum:\t2 \r\n\r\nNEXT", decoded{"x", []string{"X-Sum=1", "x-sum=2"}, "NEXT"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, src := range []func(io.Reader) io.Reader{identity, iotest.OneByteReader} {
				got, err := decodeChunked(tc.in, src)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("decoded (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// Tests that the ChunkedReader refuses each malformed body with its reason.
func TestChunkedReaderRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, reason string }{
		{"a chunk-size line ending in a bare LF (CVE-2025-22871)", "3\nabc\r\n0\r\n\r\n", ReasonBareLF},
		{"a bare LF after the last chunk", "0\n\r\n", ReasonBareLF},
		{"a bare CR in a chunk extension", "3;a\rb\r\nabc\r\n0\r\n\r\n", ReasonBareCR},
		{"a LF inside a chunk extension", "3;a\nb\r\nabc\r\n0\r\n\r\n", ReasonBareLF},
		{"no chunk size", ";a\r\nabc\r\n0\r\n\r\n", ReasonChunkSize},
		{"a chunk size that is not hexadecimal", "3g\r\nabc\r\n0\r\n\r\n", ReasonChunkSize},
		{"a chunk size with a sign", "+3\r\nabc\r\n0\r\n\r\n", ReasonChunkSize},
		{"a chunk size with a 0x prefix", "0x3\r\nabc\r\n0\r\n\r\n", ReasonChunkSize},
		{"whitespace after the chunk size", "3 \r\nabc\r\n0\r\n\r\n", ReasonChunkSize},
		{"sixteen digits", "0000000000000003\r\nabc\r\n0\r\n\r\n", ReasonChunkSizeOverflow},
		{"a chunk size over int64", "fffffffffffffffff\r\n", ReasonChunkSizeOverflow},
		{"an extension without a name", "3;\r\nabc\r\n0\r\n\r\n", ReasonChunkExtension},
		{"an extension with an empty value", "3;a=\r\nabc\r\n0\r\n\r\n", ReasonChunkExtension},
		{"an extension with a control byte", "3;a=\x01\r\nabc\r\n0\r\n\r\n", ReasonChunkExtension},
		{"an extension with an unterminated quoted value", "3;a=\"b\r\nabc\r\n0\r\n\r\n", ReasonChunkExtension},
		{"an extension without its semicolon", "3;a b\r\nabc\r\n0\r\n\r\n", ReasonChunkExtension},
		{"data longer than its size", "3\r\nabcd\r\n0\r\n\r\n", ReasonChunkEnd},
		{"data followed by a bare LF", "3\r\nabc\n0\r\n\r\n", ReasonChunkEnd},
		{"a chunk-size line over 4 KiB", "3;a=" + strings.Repeat("b", 4096) + "\r\nabc\r\n0\r\n\r\n", ReasonChunkLineTooLong},
		{"tiny chunks under long extensions", strings.Repeat("1;"+strings.Repeat("a", 200)+"\r\nx\r\n", 100) + "0\r\n\r\n", ReasonChunkOverhead},
		{"a trailer line ending in a bare LF", "0\r\nX: 1\n\r\n", ReasonBareLF},
		{"a trailer folded over two lines", "0\r\nX: 1\r\n 2\r\n\r\n", ReasonObsFold},
		{"a trailer with a space before the colon", "0\r\nX : 1\r\n\r\n", ReasonSpaceBeforeColon},
		{"a trailer with a control byte", "0\r\nX: \x00\r\n\r\n", ReasonFieldValue},
		{"a trailer name that is not a token", "0\r\nX(: 1\r\n\r\n", ReasonFieldName},
		{"a trailer section over 4 KiB", "0\r\nX: " + strings.Repeat("a", 4096) + "\r\n\r\n", ReasonHeadTooLarge},
		{"more trailers than the field limit", "0\r\n" + strings.Repeat("X: 1\r\n", 101) + "\r\n", ReasonTooManyFields},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, src := range []func(io.Reader) io.Reader{identity, iotest.OneByteReader} {
				_, err := decodeChunked(tc.in, src)
				var e *Error
				if !errors.As(err, &e) || e.Status != 400 || e.Reason != tc.reason {
					t.Fatalf("decode = %v, want 400 %s", err, tc.reason)
				}
			}
		})
	}
}

// Tests that a body cut short is io.ErrUnexpectedEOF wherever it ends, and that the error
// stays.
func TestChunkedReaderTruncated(t *testing.T) {
	t.Parallel()
	in := "3;a=b\r\nabc\r\n0\r\nX: 1\r\n\r\n"
	for n := range len(in) {
		_, err := decodeChunked(in[:n], identity)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("first %d bytes: %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
}

// Tests that what the writers produce decodes, with net/http's reader and ours, to the payload
// and the valid trailers.
func TestChunkWritersRoundTrip(t *testing.T) {
	t.Parallel()
	var b []byte
	b = AppendChunk(b, []byte("hello, "))
	b = AppendChunk(b, nil)
	b = AppendChunkHeader(b, 300)
	b = append(b, strings.Repeat("w", 300)...)
	b = append(b, "\r\n"...)
	b = AppendLastChunk(b, []Field{
		{[]byte("X-Sum"), []byte("42")},
		{[]byte("X-Bad"), []byte("a\r\nInjected: 1")},
		{[]byte("X Bad"), []byte("1")},
	})
	want := "hello, " + strings.Repeat("w", 300)
	got, err := decodeChunked(string(b)+"NEXT", identity)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if diff := cmp.Diff(decoded{want, []string{"X-Sum=42"}, "NEXT"}, got); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	theirs, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(b)))
	if err != nil || string(theirs) != want {
		t.Errorf("net/http decodes %q, %v", theirs, err)
	}
	if !bytes.HasPrefix(b, []byte("7\r\nhello, \r\n12c\r\n")) {
		t.Errorf("chunk lines: %q", b[:20])
	}
}

// Tests that decoding a body into a reused reader allocates nothing.
func TestChunkedReaderAllocatesNothing(t *testing.T) {
	in := []byte("3;a=b\r\nabc\r\n0\r\nX: 1\r\n\r\n")
	src := bytes.NewReader(in)
	br := bufio.NewReader(src)
	var c ChunkedReader
	p := make([]byte, 64)
	decode := func() {
		src.Reset(in)
		br.Reset(src)
		c.Reset(br, nil)
		for {
			if _, err := c.Read(p); err != nil {
				return
			}
		}
	}
	decode()
	if allocs := testing.AllocsPerRun(100, decode); allocs != 0 {
		t.Errorf("%v allocations per body, want 0", allocs)
	}
}

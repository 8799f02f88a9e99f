package http1

import (
	"bufio"
	"bytes"
	"errors"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/textproto"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ckResult is what a chunked body decodes to: payload, trailers (canonical names), where it
// ended, and the error that ended it (nil for a whole body).
type ckResult struct {
	Payload  string
	Trailers http.Header
	End      int
	Err      error
}

// ckTheirs decodes in as net/http's server decodes a chunked request body: http.ReadRequest
// over a 4 KiB bufio.Reader, the body read to its end, the trailers in Request.Trailer.
func ckTheirs(in []byte) ckResult {
	head := "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
	under := bytes.NewReader(append([]byte(head), in...))
	br := bufio.NewReaderSize(under, 4096)
	req, err := http.ReadRequest(br)
	if err != nil {
		return ckResult{Err: err}
	}
	payload, err := io.ReadAll(req.Body)
	res := ckResult{Payload: string(payload), Err: err}
	if err == nil {
		res.Trailers = req.Trailer
		res.End = len(in) - under.Len() - br.Buffered() // under holds the head too, read already
	}
	return res
}

// ckOurs decodes in with a ChunkedReader over a 4 KiB bufio.Reader of src, reading into
// buffers of random sizes when rng is set.
func ckOurs(in []byte, src func(io.Reader) io.Reader, rng *rand.Rand) ckResult {
	under := bytes.NewReader(in)
	br := bufio.NewReaderSize(src(under), 4096)
	var c ChunkedReader
	c.Reset(br, nil)
	var payload []byte
	buf := make([]byte, 512)
	var err error
	for {
		p := buf
		if rng != nil {
			p = buf[:rng.IntN(len(buf))+1]
		}
		var n int
		n, err = c.Read(p)
		payload = append(payload, p[:n]...)
		if err != nil {
			break
		}
	}
	res := ckResult{Payload: string(payload), Err: err}
	if errors.Is(err, io.EOF) {
		res.Err = nil
		res.End = len(in) - under.Len() - br.Buffered()
		for _, f := range c.Trailers() {
			if res.Trailers == nil {
				res.Trailers = http.Header{}
			}
			k := textproto.CanonicalMIMEHeaderKey(string(f.Name))
			res.Trailers[k] = append(res.Trailers[k], string(f.Value))
		}
	}
	return res
}

// ckRandomReads returns a reader that returns reads of random sizes from one byte up.
func ckRandomReads(rng *rand.Rand) func(io.Reader) io.Reader {
	return func(r io.Reader) io.Reader { return &ckRandomReader{r, rng} }
}

type ckRandomReader struct {
	r   io.Reader
	rng *rand.Rand
}

func (r *ckRandomReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1+r.rng.IntN(min(len(p), 64))]
	}
	return r.r.Read(p)
}

// FuzzChunked checks ChunkedReader against net/http's decoding of a chunked request body on
// the same bytes (the corpus is testdata/fuzz/FuzzChunked): when both accept, the same payload,
// trailers and end; what net/http refuses it refuses; a refusal of what net/http accepts has an
// allow-listed reason that an independent check finds in the bytes; and none of this depends
// on the sizes of the reads.
func FuzzChunked(f *testing.F) {
	f.Add([]byte("3\r\nabc\r\n0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h := fnv.New64a()
		_, _ = h.Write(in)
		rng := rand.New(rand.NewPCG(h.Sum64(), 2))
		ours := ckOurs(in, identity, nil)
		for _, src := range []func(io.Reader) io.Reader{ckRandomReads(rng), ckRandomReads(rng)} {
			split := ckOurs(in, src, rng)
			if diff := cmp.Diff(ours, split, cmp.Comparer(ckSameErr)); diff != "" {
				t.Fatalf("reads of random sizes decode differently (-whole +split):\n%s\non %q", diff, in)
			}
		}
		theirs := ckTheirs(in)
		switch {
		case ours.Err == nil && theirs.Err != nil:
			t.Fatalf("accepted what net/http refuses (%v): %q", theirs.Err, in)
		case ours.Err == nil:
			if diff := cmp.Diff(theirs, ours, cmp.Comparer(ckSameErr)); diff != "" {
				t.Fatalf("net/http and ChunkedReader differ (-net/http +ours):\n%s\non %q", diff, in)
			}
		case theirs.Err == nil:
			ckExplain(t, in, ours.Err)
		}
	})
}

// ckSameErr compares errors by their text: both nil, or the same message.
func ckSameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Error() == b.Error()
}

var (
	ckToken  = "[!#$%&'*+\\-.^_`|~0-9A-Za-z]+"
	ckQuoted = `"(?:[\t \x21\x23-\x5b\x5d-\x7e(]|\\[\t \x21-\x7e])*"`
	ckExt    = `[ \t]*;[ \t]*` + ckToken + `(?:[ \t]*=[ \t]*(?:` + ckToken + `|` + ckQuoted + `))?`
	// ckSizeLine is a chunk-size line as ParseChunkLine accepts it, bytes over 0x7f mapped
	// to "(" (allowed in a quoted string only, as obs-text is).
	ckSizeLine = regexp.MustCompile(`^[0-9A-Fa-f]{1,15}(?:` + ckExt + `)*[ \t]*$`)
	ckExtStart = regexp.MustCompile(`^[0-9A-Fa-f]+;`)
)

// ckLines returns the lines of in, CR before LF kept.
func ckLines(in []byte) []string { return strings.Split(string(in), "\n") }

// ckAllowed maps the reasons for which ChunkedReader may refuse what net/http accepts to a
// check that the bytes show it.
var ckAllowed = map[string]func(in []byte) bool{
	ReasonBareLF: func(in []byte) bool { return regexp.MustCompile(`(^|[^\r])\n`).Match(in) },
	ReasonObsFold: func(in []byte) bool {
		return regexp.MustCompile(`\n[ \t]`).Match(in)
	},
	ReasonSpaceBeforeColon: func(in []byte) bool {
		return regexp.MustCompile(`\n[!#$%&'*+\-.^_` + "`" + `|~0-9A-Za-z]+[ \t][^\n]*:`).Match(in)
	},
	ReasonChunkSize: func(in []byte) bool {
		return regexp.MustCompile(`(?m)^[0-9A-Fa-f]+[ \t]+\r?$`).Match(in)
	},
	ReasonChunkSizeOverflow: func(in []byte) bool {
		return regexp.MustCompile(`(?m)^[0-9A-Fa-f]{16}`).Match(in)
	},
	ReasonChunkExtension: func(in []byte) bool {
		for _, l := range ckLines(in) {
			l = strings.TrimSuffix(l, "\r")
			mapped := strings.Map(func(r rune) rune {
				if r >= 0x80 {
					return '('
				}
				return r
			}, l)
			if strings.ContainsRune(l, ';') && ckExtStart.MatchString(l) && !ckSizeLine.MatchString(mapped) {
				return true
			}
		}
		return false
	},
	ReasonTooManyFields: func(in []byte) bool {
		return len(ckLines(in)) > DefaultMaxHeaderCount
	},
}

// ckExplain fails unless a refusal of what net/http accepts is allow-listed and its check finds
// the reason in the bytes.
func ckExplain(t *testing.T, in []byte, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("refused with %v what net/http accepts: %q", err, in)
	}
	check, ok := ckAllowed[e.Reason]
	if !ok {
		t.Fatalf("refused (%s) what net/http accepts, a reason not on the allow-list: %q", e.Reason, in)
	}
	if !check(in) {
		t.Fatalf("refused (%s) what net/http accepts, and the bytes do not show it: %q", e.Reason, in)
	}
}

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
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzRequestHead checks ParseRequest against net/http on the same bytes (the corpus is
// testdata/fuzz/FuzzRequestHead, seeded from the hostile suite and the smuggling families):
//
//	P1 what ParseRequest accepts, net/http's server accepts;
//	P2 when both accept, method, target, version, Host, fields, framing and persistence agree;
//	P3 what ParseRequest refuses and net/http accepts has an allow-listed reason that an
//	   independent check finds in the bytes;
//	P4 the verdict and the head's length do not depend on how the bytes arrive;
//	P5 the boundaries of pipelined requests are http.ReadRequest's.
func FuzzRequestHead(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var r Request
		err := ParseRequest(in, &r, nil)
		rqCheckSplits(t, in, &r, err)
		v, oerr := oracleServe(in)
		if oerr != nil {
			t.Fatalf("%v: %q", oerr, in)
		}
		ours := rqSequence(in)
		for k, p := range ours {
			if k >= len(v.handled) {
				break
			}
			if p.err != nil {
				rqExplain(t, in[p.start:], p.err)
				break
			}
			rqCompare(t, in, &p.req, v.handled[k])
		}
		if n := rqAccepted(ours); n > len(v.handled) && v.refused != 0 {
			t.Fatalf("P1: request %d accepted, net/http refused it %d: %q", len(v.handled), v.refused, in)
		}
		if errors.Is(err, ErrIncomplete) && len(v.handled) > 0 {
			t.Fatalf("P1: incomplete head, net/http served it: %q", in)
		}
		if err == nil && len(v.handled) == 0 && v.refused == 0 {
			t.Fatalf("P1: accepted a head net/http waits on: %q", in)
		}
		rqCheckBoundaries(t, in, ours)
	})
}

// rqParsed is one request of a pipelined sequence as ParseRequest and ChunkedReader see it:
// where it starts and ends, or the error that stopped the sequence there.
type rqParsed struct {
	req        Request
	start, end int
	err        error
}

// rqSequence parses the requests of in one after the other, each with its body, stopping at an
// error, a body or head cut short, and a request after which the connection does not persist
// (Connection: close, HTTP/1.0, or an unanswered 100-continue).
func rqSequence(in []byte) []rqParsed {
	var out []rqParsed
	for off := 0; off < len(in); {
		p := rqParsed{start: off}
		p.err = ParseRequest(in[off:], &p.req, nil)
		if errors.Is(p.err, ErrIncomplete) {
			return out
		}
		if p.err == nil {
			n, err := rqBodyLen(in[off+p.req.HeadLen:], &p.req)
			if err != nil {
				return out
			}
			p.end = off + p.req.HeadLen + n
		}
		out = append(out, p)
		if p.err != nil || !p.req.KeepAlive || p.req.Expect100 {
			return out
		}
		off = p.end
	}
	return out
}

// rqBodyLen returns the length of the body at the start of b framed as r says.
func rqBodyLen(b []byte, r *Request) (int, error) {
	if !r.Chunked {
		n := max(r.ContentLength, 0)
		if n > int64(len(b)) {
			return 0, io.ErrUnexpectedEOF
		}
		return int(n), nil
	}
	under := bytes.NewReader(b)
	br := bufio.NewReader(under)
	var c ChunkedReader
	c.Reset(br, nil)
	if _, err := io.Copy(io.Discard, &c); err != nil {
		return 0, err
	}
	return len(b) - under.Len() - br.Buffered(), nil
}

// rqAccepted counts the requests of a sequence that ParseRequest accepted.
func rqAccepted(seq []rqParsed) int {
	for i, p := range seq {
		if p.err != nil {
			return i
		}
	}
	return len(seq)
}

// rqCheckSplits feeds in as a server reads it, in growing prefixes of random sizes from one
// byte up (then growing with the prefix, so that a large input costs few parses), and fails unless the first verdict that is not ErrIncomplete is the whole input's
// (P4).
func rqCheckSplits(t *testing.T, in []byte, whole *Request, werr error) {
	t.Helper()
	h := fnv.New64a()
	_, _ = h.Write(in)
	rng := rand.New(rand.NewPCG(h.Sum64(), 1))
	for plan := range 3 {
		var r Request
		n, err := 0, ErrIncomplete
		for errors.Is(err, ErrIncomplete) && n < len(in) {
			step := 1
			if plan > 0 || n >= 1024 {
				step = 1 + rng.IntN(max(64<<plan, n/4))
			}
			n = min(n+step, len(in))
			err = ParseRequest(in[:n], &r, nil)
		}
		if !errors.Is(err, werr) {
			t.Fatalf("P4: whole input %v, fed in reads (plan %d) %v after %d bytes: %q", werr, plan, err, n, in)
		}
		if err == nil && r.HeadLen != whole.HeadLen {
			t.Fatalf("P4: head of %d bytes whole, %d fed in reads: %q", whole.HeadLen, r.HeadLen, in)
		}
	}
}

// rqCompare fails unless net/http made of a request what ParseRequest did (P2).
func rqCompare(t *testing.T, in []byte, r *Request, o oracleRequest) {
	t.Helper()
	got := oracleRequest{
		Method: string(r.Method), RequestURI: string(r.Target), Host: string(r.Host),
		ProtoMajor: 1, ProtoMinor: r.Minor, Header: rqHeader(r),
		ContentLength: max(r.ContentLength, 0), Chunked: r.Chunked, Close: !r.KeepAlive,
	}
	if r.Chunked {
		got.ContentLength = -1
	}
	if diff := cmp.Diff(o, got); diff != "" {
		t.Fatalf("P2: net/http and ParseRequest differ (-net/http +ours):\n%s\non %q", diff, in)
	}
	if want := r.Minor == 1 && strings.EqualFold(o.Header.Get("Expect"), "100-continue"); r.Expect100 != want {
		t.Fatalf("P2: Expect100 %v, net/http %v: %q", r.Expect100, want, in)
	}
}

// rqHeader returns r's fields as net/http's server hands them to a handler: canonical names,
// without Host, Transfer-Encoding, and for a chunked request Content-Length and Trailer, and
// with Pragma: no-cache implying Cache-Control.
func rqHeader(r *Request) http.Header {
	h := http.Header{}
	for _, f := range r.Fields {
		k := textproto.CanonicalMIMEHeaderKey(string(f.Name))
		h[k] = append(h[k], string(f.Value))
	}
	delete(h, "Host")
	delete(h, "Transfer-Encoding")
	if r.Chunked {
		delete(h, "Content-Length")
		delete(h, "Trailer")
	}
	if p := h["Pragma"]; len(p) > 0 && p[0] == "no-cache" && h["Cache-Control"] == nil {
		h["Cache-Control"] = []string{"no-cache"}
	}
	return h
}

// rqCheckBoundaries fails unless the pipelined requests ParseRequest accepts end where
// http.ReadRequest's do (P5), and http.ReadRequest reads each of them.
func rqCheckBoundaries(t *testing.T, in []byte, ours []rqParsed) {
	t.Helper()
	theirs := oracleBoundaries(in)
	for k := range rqAccepted(ours) {
		if k >= len(theirs) {
			t.Fatalf("P5: request %d accepted, http.ReadRequest refuses it: %q", k, in)
		}
		if ours[k].end != theirs[k].end {
			t.Fatalf("P5: request %d ends at %d, at %d for http.ReadRequest: %q", k, ours[k].end, theirs[k].end, in)
		}
	}
}

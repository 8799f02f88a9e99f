package dataplane_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// abTag stands, in a stream's targets, for the stream's own prefix (abRun replaces it), so
// that each stream's requests are told apart at the backend.
const abTag = "/@/"

// fixedStreams are the streams every run of the A/B test sends: the hostile suite's framing
// and syntax cases, and the exchanges a codec gets wrong first.
func fixedStreams() []abStream {
	get := func(path string) string { return "GET " + abTag + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }
	smuggled := get("smuggled")
	one := func(name, raw string, methods ...string) abStream {
		if len(methods) == 0 {
			methods = []string{strings.Fields(raw)[0]}
		}
		return abStream{name: name, pieces: []string{raw}, methods: methods}
	}
	streams := []abStream{
		one("three pipelined GETs", get("1")+get("2")+get("3"), "GET", "GET", "GET"),
		one("a chunked POST with extensions and trailers", "POST "+abTag+"c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;a=b\r\nabc\r\n2\r\nde\r\n0\r\nX-Sum: 9\r\n\r\n"),
		one("Expect: 100-continue", "PUT "+abTag+"e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\nbody"),
		one("HTTP/1.0 with keep-alive, then HTTP/1.1", "GET "+abTag+"10 HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"+get("11"), "GET", "GET"),
		one("HTTP/1.0 without keep-alive", "GET "+abTag+"10 HTTP/1.0\r\nHost: x\r\n\r\n"+get("never"), "GET", "GET"),
		one("absolute-form with another Host", "GET http://a.example"+abTag+"abs HTTP/1.1\r\nHost: b.example\r\n\r\n"),
		one("OPTIONS * before a GET", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"+get("after"), "OPTIONS", "GET"),
		one("HEAD", "HEAD "+abTag+"h HTTP/1.1\r\nHost: x\r\n\r\n"+get("after"), "HEAD", "GET"),
		one("Connection: close", "GET "+abTag+"c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"+get("never"), "GET", "GET"),
		one("duplicate fields keep their order", "GET "+abTag+"d HTTP/1.1\r\nHost: x\r\nX-D: 1\r\nx-d: 2\r\nX-D: 3\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n"),
		one("CL.TE", fmt.Sprintf("POST "+abTag+" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", 5+len(smuggled), smuggled), "POST", "GET"),
		one("TE.CL", fmt.Sprintf("POST "+abTag+" HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled), "POST", "GET"),
		one("TE.TE", "POST "+abTag+" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\nContent-Length: 3\r\n\r\nabc"+smuggled, "POST", "GET"),
		one("equal duplicate Content-Lengths", "POST "+abTag+" HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"+smuggled, "POST", "GET"),
		one("a Content-Length list", "POST "+abTag+" HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc"+smuggled, "POST", "GET"),
		one("bare LF", "GET "+abTag+"lf HTTP/1.1\nHost: x\n\n"+get("after"), "GET", "GET"),
		one("bare CR", "GET "+abTag+" HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n"+smuggled, "GET", "GET"),
		one("obs-fold", "GET "+abTag+" HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n"+get("after"), "GET", "GET"),
		one("whitespace before a colon", "GET "+abTag+" HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n"+smuggled, "GET", "GET"),
		one("NUL in a value", "GET "+abTag+" HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n"+smuggled, "GET", "GET"),
		one("a chunk size that overflows", "POST "+abTag+" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff1\r\nabc\r\n0\r\n\r\n"+smuggled, "POST", "GET"),
		one("a chunk line ended by a bare LF", "POST "+abTag+" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n"+smuggled, "POST", "GET"),
		one("TE in HTTP/1.0", "POST "+abTag+" HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc"),
		one("an unknown expectation", "POST "+abTag+" HTTP/1.1\r\nHost: x\r\nExpect: nothing\r\nContent-Length: 3\r\n\r\nabc"+smuggled, "POST", "GET"),
	}
	post := "POST " + abTag + "slow HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
	streams = append(streams,
		abStream{name: "a POST trickled byte by byte", pieces: strings.Split(post, ""), pause: time.Millisecond, methods: []string{"POST"}},
		abStream{name: "a client that leaves in the middle of a head", pieces: []string{get("1") + "GET " + abTag + "2 HTTP/1.1\r\nHo"}, methods: []string{"GET"}, cut: true},
		abStream{name: "a client that leaves in the middle of a body", pieces: []string{get("1") + "POST " + abTag + "2 HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"}, methods: []string{"GET"}, cut: true},
	)
	return streams
}

// randomStreams draws n streams from r: one to four pipelined requests of random methods,
// fields and bodies (by Content-Length or chunked), a quarter of them with one hostile
// mutation, written in random splits, some trickled, some cut by the client.
func randomStreams(r *rand.Rand, n int) []abStream {
	out := make([]abStream, 0, n)
	for i := range n {
		var b, heads strings.Builder
		var methods []string
		k := 1 + r.IntN(4)
		for j := range k {
			m, raw, head := randomRequest(r, j == k-1)
			methods = append(methods, m)
			b.WriteString(raw)
			heads.WriteString(head)
		}
		raw := b.String()
		name := fmt.Sprintf("random %d: %d requests", i, k)
		if r.IntN(4) == 0 {
			var what, mutated string
			raw, mutated, what = mutate(r, raw)
			heads.WriteString(mutated)
			name += ", " + what
		}
		s := abStream{name: name, methods: methods}
		if r.IntN(8) == 0 {
			_, next, head := randomRequest(r, false)
			n := 1 + r.IntN(len(next)-1)
			raw += next[:n]
			heads.WriteString(head[:min(n, len(head))])
			s.cut = true
			s.name += ", cut"
		}
		s.heads = heads.String()
		switch {
		case len(raw) < 300 && r.IntN(10) == 0:
			s.pieces, s.pause = strings.Split(raw, ""), 200*time.Microsecond
			s.name += ", trickled"
		default:
			var at []int
			for range r.IntN(5) {
				at = append(at, r.IntN(len(raw)))
			}
			slices.Sort(at)
			s.pieces = splitAt(raw, at...)
			if len(at) > 0 {
				s.pause = time.Millisecond
			}
		}
		out = append(out, s)
	}
	return out
}

var abFields = []string{
	"X-A: 1", "x-lower: value", "X-Dup: 1\r\nX-Dup: 2", "Accept: */*", "Cookie: a=b", "Cookie: c=d",
	"X-Empty:", "X-Spaces:   padded   ", "User-Agent: ab", "Connection: keep-alive", "X-Tab:\tt",
	"X-Obs-Text: caf\xc3\xa9", "Cache-Control: no-cache", "X-Forwarded-For: 10.0.0.1", "Accept-Encoding: gzip",
}

// randomRequest draws one request, and returns it and its head and chunk lines without the
// body data; last says whether it ends its stream.
func randomRequest(r *rand.Rand, last bool) (method, raw, heads string) {
	methods := []string{"GET", "GET", "GET", "POST", "POST", "PUT", "HEAD", "DELETE", "PATCH", "OPTIONS"}
	method = methods[r.IntN(len(methods))]
	target := fmt.Sprintf("%sp%d/%s", abTag, r.IntN(1000), []string{"", "a/b", "x.txt", "q?x=1&y=2", "%41"}[r.IntN(5)])
	if r.IntN(10) == 0 {
		target = "http://h.example" + target
	}
	version := "HTTP/1.1"
	var b strings.Builder
	if r.IntN(10) == 0 {
		version = "HTTP/1.0"
	}
	fmt.Fprintf(&b, "%s %s %s\r\nHost: %s\r\n", method, target, version, []string{"x", "x:80", "a.example"}[r.IntN(3)])
	for range r.IntN(6) {
		b.WriteString(abFields[r.IntN(len(abFields))] + "\r\n")
	}
	if version == "HTTP/1.0" && r.IntN(2) == 0 {
		b.WriteString("Connection: keep-alive\r\n")
	}
	if last && version == "HTTP/1.1" && r.IntN(3) == 0 {
		b.WriteString("Connection: close\r\n")
	}
	body := ""
	if method == "POST" || method == "PUT" || method == "PATCH" || r.IntN(10) == 0 {
		body = randomBody(r, 1+r.IntN(2000))
	}
	switch {
	case body == "":
		b.WriteString("\r\n")
		return method, b.String(), b.String()
	case version == "HTTP/1.1" && r.IntN(2) == 0:
		if r.IntN(4) == 0 {
			b.WriteString("Expect: 100-continue\r\n")
		}
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		head := b.String()
		framed, lines := chunk(r, body)
		return method, head + framed, head + lines
	default:
		if version == "HTTP/1.1" && r.IntN(4) == 0 {
			b.WriteString("Expect: 100-continue\r\n")
		}
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
		return method, b.String() + body, b.String()
	}
}

func randomBody(r *rand.Rand, n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789\r\n\x00\xff -"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// chunk frames body in random chunks, some with an extension, and sometimes a trailer; it
// returns the framed body and its lines without the data.
func chunk(r *rand.Rand, body string) (framed, lines string) {
	var b, l strings.Builder
	for body != "" {
		n := min(len(body), 1+r.IntN(700))
		ext := ""
		if r.IntN(5) == 0 {
			ext = ";e=1"
		}
		fmt.Fprintf(&b, "%x%s\r\n%s\r\n", n, ext, body[:n])
		fmt.Fprintf(&l, "%x%s\r\n\r\n", n, ext)
		body = body[n:]
	}
	end := "0\r\n"
	if r.IntN(3) == 0 {
		end += "X-Trailer: t\r\n"
	}
	end += "\r\n"
	return b.String() + end, l.String() + end
}

// mutate applies one hostile change to the first request of raw, and returns the stream, the
// mutated head and the change's name.
func mutate(r *rand.Rand, raw string) (stream, head, what string) {
	head, rest, _ := strings.Cut(raw, "\r\n\r\n")
	lines := strings.Split(head, "\r\n")
	add := func(field, what string) (string, string, string) {
		h := head + "\r\n" + field + "\r\n\r\n"
		return h + rest, h, what
	}
	switch r.IntN(9) {
	case 0:
		i := r.IntN(len(lines))
		h := strings.Join(lines[:i+1], "\r\n") + "\n" + strings.Join(lines[i+1:], "\r\n") + "\r\n\r\n"
		return h + rest, h, "bare LF"
	case 1:
		return add("X-Folded: a\r\n folded", "obs-fold")
	case 2:
		return add("X-Ctl: a\x01b", "a control byte")
	case 3:
		return add("X-Colon : 1", "whitespace before a colon")
	case 4:
		return add("Content-Length: 0, 0", "a Content-Length list")
	case 5:
		return add("Transfer-Encoding: chunked", "an added Transfer-Encoding")
	case 6:
		return add("Content-Length: 7", "an added Content-Length")
	case 7:
		return add("Host: other", "a second Host")
	}
	h := strings.Replace(head, "\r\n", "\r", 1) + "\r\n\r\n"
	return h + rest, h, "bare CR"
}

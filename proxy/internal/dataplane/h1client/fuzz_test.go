package h1client

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// FuzzForwardRoundTrip checks the bytes the client writes for a request: they parse with
// net/http to the same method, target, Host and end-to-end fields (order and duplicates kept),
// with exactly one Host, at most one framing field, no hop-by-hop field and no field the
// request's Connection named; the transport's own connection fields are only Connection:
// Upgrade or close, Upgrade with an upgrade, TE: trailers and the Trailer of a chunked body.
func FuzzForwardRoundTrip(f *testing.F) {
	f.Add("GET", "/a?b=c", "example.com", "X-A: 1\nx-a: 2\nZ: 3", int64(0), false)
	f.Add("POST", "/p", "example.com:8080", "Connection: keep-alive, X-Drop\nX-Drop: 1\nKeep-Alive: 5\nProxy-Connection: x\nTe: trailers, gzip", int64(10), false)
	f.Add("PUT", "//double", "h", "Transfer-Encoding: chunked\nContent-Length: 5\nHost: evil\nTrailer: X", int64(-1), true)
	f.Add("GET", "/ws", "h", "Connection: Upgrade\nUpgrade: websocket\nSec-Websocket-Key: k", int64(0), false)
	f.Add("OPTIONS", "*", "h", "User-Agent:\nX-Empty:", int64(0), false)
	f.Add("GET", "/a b", "h", "X: a\r\nInjected: 1", int64(0), false)
	f.Fuzz(func(t *testing.T, method, target, host, fields string, length int64, trailers bool) {
		req := fuzzRequest(method, target, host, fields, length, trailers)
		fr, _ := requestFraming(req)
		var c conn
		head, err := c.appendHead(nil, req, fr)
		if err != nil {
			return
		}
		parsed, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		if err != nil {
			t.Fatalf("net/http cannot read what the client wrote (%v): %q", err, head)
		}
		checkWritten(t, req, fr, head, parsed)
	})
}

// fuzzRequest builds a request from fuzzed parts; fields are "name: value" lines, names as
// they come (not canonicalized).
func fuzzRequest(method, target, host, fields string, length int64, trailers bool) *http.Request {
	req := &http.Request{
		Method: method, Host: host, Header: http.Header{},
		URL: &url.URL{Scheme: "http", Host: "backend:80", Opaque: target},
	}
	for line := range strings.SplitSeq(fields, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			req.Header[k] = append(req.Header[k], v)
		}
	}
	if length != 0 {
		n := min(max(length, -1), 100)
		req.ContentLength = n
		req.Body = io.NopCloser(strings.NewReader(strings.Repeat("b", int(max(n, 1)))))
	}
	if trailers {
		req.Trailer = http.Header{"X-Trailer": nil}
	}
	return req
}

// checkWritten checks the written head against the request it was written for.
func checkWritten(t *testing.T, req *http.Request, fr framing, head []byte, parsed *http.Request) {
	t.Helper()
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if parsed.Method != method || parsed.Host != host {
		t.Fatalf("method %q host %q, net/http read %q %q: %q", method, host, parsed.Method, parsed.Host, head)
	}
	target := req.URL.Opaque
	if target == "" {
		target = req.URL.EscapedPath()
	}
	if target == "" {
		target = "/"
	}
	if req.URL.RawQuery != "" {
		target += "?" + req.URL.RawQuery
	}
	if parsed.RequestURI != target {
		t.Fatalf("target %q, net/http read %q: %q", target, parsed.RequestURI, head)
	}
	lines := strings.Split(strings.ToLower(string(head)), "\r\n")
	count := func(prefix string) int {
		n := 0
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, prefix) {
				n++
			}
		}
		return n
	}
	if count("host:") != 1 {
		t.Fatalf("%d Host fields: %q", count("host:"), head)
	}
	if count("content-length:")+count("transfer-encoding:") > 1 {
		t.Fatalf("more than one framing field: %q", head)
	}
	for _, hop := range []string{"keep-alive:", "proxy-connection:"} {
		if count(hop) > 0 {
			t.Fatalf("hop-by-hop %s written: %q", hop, head)
		}
	}
	if cl := parsed.Header.Values("Connection"); len(cl) > 1 || len(cl) == 1 && cl[0] != "Upgrade" && cl[0] != "close" {
		t.Fatalf("Connection %q written: %q", cl, head)
	}
	if len(parsed.Header.Values("Upgrade")) > 0 && !fr.upgrade {
		t.Fatalf("Upgrade written without an upgrade: %q", head)
	}
	want := endToEnd(req.Header)
	got := http.Header{}
	for k, vs := range parsed.Header {
		switch k {
		case "Connection", "Upgrade", "Te", "Trailer", "Content-Length":
			continue
		}
		got[k] = vs
	}
	if !headersEqual(want, got) {
		t.Fatalf("end-to-end fields %q, net/http read %q: %q", want, got, head)
	}
}

// endToEnd is what the client must forward of h: the fields that are neither connection nor
// framing fields nor named by Connection, canonical, values trimmed, in the order of the names
// as sent, sorted.
func endToEnd(h http.Header) http.Header {
	named := func(k string) bool {
		for _, v := range h["Connection"] {
			for tok := range strings.SplitSeq(v, ",") {
				if asciiFold(textproto.TrimString(tok), k) {
					return true
				}
			}
		}
		return false
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	})
	out := http.Header{}
	for _, k := range keys {
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if connectionFields[ck] || named(k) {
			continue
		}
		for _, v := range h[k] {
			out[ck] = append(out[ck], textproto.TrimString(v))
		}
	}
	return out
}

func headersEqual(a, b http.Header) bool {
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

// streamBackend answers the requests of one fuzz run: the response to a request is the next
// script, with every tagMark replaced by the request's tag (its X-Tag), and a script whose
// first byte is odd closes the connection after it.
type streamBackend struct {
	ln      net.Listener
	scripts [][]byte
	mu      sync.Mutex
	next    int
	wg      sync.WaitGroup
}

const tagMark = '\xfe'

func (b *streamBackend) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer func() { _ = c.Close() }()
			br := bufio.NewReader(c)
			for {
				r, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				script, ok := b.script()
				if !ok {
					return
				}
				out := bytes.ReplaceAll(script, []byte{tagMark}, []byte(r.Header.Get("X-Tag")))
				if _, err := c.Write(out); err != nil || len(script) > 0 && script[0]&1 == 1 {
					return
				}
			}
		}()
	}
}

func (b *streamBackend) script() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == len(b.scripts) {
		return nil, false
	}
	b.next++
	return b.scripts[b.next-1], true
}

// FuzzUpstreamStream checks the pool against a backend that answers each request with fuzzed
// bytes: every response the client hands over, body included, carries only its own request's
// tag (bytes are never attributed to another exchange), and no idle connection holds a byte.
func FuzzUpstreamStream(f *testing.F) {
	ok := "HTTP/1.1 200 OK\r\nX-Echo: \xfe\r\nContent-Length: 9\r\n\r\n<\xfe>"
	f.Add([]byte("\x00" + ok + "\xff\x00" + ok))
	f.Add([]byte("\x00" + ok + ok + "\xff\x00" + ok))
	f.Add([]byte("\x00HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n<\xfe>HTTP/1.1 200 OK\r\nX-Echo: t9\r\nContent-Length: 4\r\n\r\n<t9>\xff\x00" + ok))
	f.Add([]byte("\x00HTTP/1.1 204 No Content\r\n\r\n<\xfe>\xff\x00" + ok))
	f.Add([]byte("\x01HTTP/1.1 200 OK\r\n\r\n<\xfe>\xff\x00" + ok))
	f.Add([]byte("\x00HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n<\xfe>\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n\xff\x00" + ok))
	f.Add([]byte("\x00HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n<\xfe>\xff\x00" + ok))
	f.Fuzz(func(t *testing.T, in []byte) {
		scripts := bytes.Split(in, []byte{0xff})
		if len(scripts) > 4 {
			scripts = scripts[:4]
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b := &streamBackend{ln: ln, scripts: scripts}
		b.wg.Add(1)
		go b.serve()
		defer b.wg.Wait()
		defer func() { _ = ln.Close() }()
		tr := New(Options{Address: ln.Addr().String(), FirstByteTimeout: 30 * time.Millisecond})
		defer tr.CloseIdleConnections()
		// Tags the fuzzer cannot write itself: only the backend's substitution puts one in.
		run := fmt.Sprintf("r%d-", time.Now().UnixNano())
		tags := make([]string, len(scripts))
		for i := range tags {
			tags[i] = run + fmt.Sprint(i)
		}
		for _, tag := range tags {
			exchangeTagged(t, tr, tag, tags)
			checkIdleDrained(t, tr)
		}
	})
}

// exchangeTagged sends a request tagged tag and checks that whatever it gets carries no other
// request's tag.
func exchangeTagged(t *testing.T, tr *Transport, tag string, tags []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://x/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tag", tag)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	var seen bytes.Buffer
	_ = resp.Header.Write(&seen)
	seen.Write(body)
	for _, other := range tags {
		if other != tag && bytes.Contains(seen.Bytes(), []byte(other)) {
			t.Fatalf("request %s got bytes of %s: %q", tag, other, seen.Bytes())
		}
	}
}

// checkIdleDrained fails when an idle connection holds a byte.
func checkIdleDrained(t *testing.T, tr *Transport) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, c := range tr.idle {
		if c.br.Buffered() > 0 {
			t.Fatalf("an idle connection holds %d bytes", c.br.Buffered())
		}
	}
}

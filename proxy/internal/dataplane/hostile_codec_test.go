package dataplane_test

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
)

// outcome is what must come of a byte stream a client sends: the statuses of the responses it
// gets, in order, whether the connection then still serves requests in step, and what reached
// the backend (recorder.targets).
type outcome struct {
	statuses []int
	open     bool
	backend  []string
}

// refused is the outcome of a request refused with status: the connection closes and nothing
// reaches the backend.
func refused(status int) outcome { return outcome{statuses: []int{status}} }

// served is the outcome of requests each answered 200 by the backend, which received them.
func served(open bool, backend ...string) outcome {
	o := outcome{open: open, backend: backend}
	for range backend {
		o.statuses = append(o.statuses, 200)
	}
	return o
}

// codecCase is one byte stream and its outcome on both engines, or, when nethttp is set, its
// outcome where net/http serves the requests and differs (each such difference is listed in
// docs/http1-engine.md).
type codecCase struct {
	name    string
	raw     string
	want    outcome
	nethttp *outcome
}

func (tc codecCase) expected() outcome {
	if tc.nethttp != nil && running.server == http1.EngineNetHTTP {
		return *tc.nethttp
	}
	return tc.want
}

// check sends tc's bytes to a new data plane with opts in the given pieces and checks the
// outcome.
func (tc codecCase) check(t *testing.T, opts dataplane.Options, pieces []string) {
	t.Helper()
	proxy, rec := recordingProxy(t, opts)
	tc.exchange(t, proxy, pieces)
	eventuallyBackend(t, rec, tc.expected().backend)
}

// exchange sends tc's bytes to proxy on a new connection in the given pieces, and checks the
// statuses and the connection of the outcome.
func (tc codecCase) exchange(t *testing.T, proxy string, pieces []string) {
	t.Helper()
	want := tc.expected()
	c, br := rawConn(t, proxy)
	go writeSplit(t, c, pieces...)
	got, err := readResponses(br, len(want.statuses))
	if !slices.Equal(statuses(got), want.statuses) {
		t.Errorf("got statuses %v (%v), want %v", statuses(got), err, want.statuses)
	}
	switch {
	case want.open:
		if !stayedOpen(c, br) {
			t.Error("the connection does not serve the next request in step")
		}
	case !closedSoon(c):
		t.Error("the connection stayed open")
	}
	_ = c.Close()
}

// eventuallyBackend checks that the backend received want: it polls, since a cut request is
// recorded when the backend's read of it fails.
func eventuallyBackend(t *testing.T, rec *recorder, want []string) {
	t.Helper()
	var got []string
	for range 50 {
		if got = rec.targets(); slices.Equal(got, want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("backend received %q, want %q", got, want)
}

func run(t *testing.T, opts dataplane.Options, cases []codecCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.check(t, opts, []string{tc.raw})
		})
	}
}

// Tests the head's grammar over raw sockets: line endings other than CRLF, obs-fold,
// whitespace before the colon, control bytes in names and values and malformed request lines
// are refused with 400 and the connection closes, and nothing reaches the backend.
func TestHostileHeadSyntax(t *testing.T) {
	t.Parallel()
	lfServed := served(true, "GET /lf")
	folded, foldedTE := served(true, "GET /"), served(true, "POST / abc")
	run(t, dataplane.Options{}, []codecCase{
		{"pipelined requests are answered in order", "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n", served(true, "GET /1", "GET /2"), nil},
		{"bare LF ends every line", "GET /lf HTTP/1.1\nHost: x\n\n", refused(400), &lfServed},
		{"bare LF ends one field", "GET /lf HTTP/1.1\r\nHost: x\nX: y\r\n\r\n", refused(400), &lfServed},
		{"bare LF ends the head", "GET /lf HTTP/1.1\r\nHost: x\r\n\n", refused(400), &lfServed},
		{"bare LF ends the request line", "GET /lf HTTP/1.1\nHost: x\r\n\r\n", refused(400), &lfServed},
		{"bare CR in a value", "GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n", refused(400), nil},
		{"bare CR ends the request line", "GET / HTTP/1.1\rHost: x\r\n\r\n", refused(400), nil},
		{"bare CR ends a field", "GET / HTTP/1.1\r\nHost: x\rX: y\r\n\r\n", refused(400), nil},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", refused(400), &folded},
		{"obs-fold hiding Transfer-Encoding", "POST / HTTP/1.1\r\nHost: x\r\nX: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", refused(400), &foldedTE},
		{"a first field line that starts with whitespace", "GET / HTTP/1.1\r\n Host: x\r\n\r\n", refused(400), nil},
		{"a space before the colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", refused(400), nil},
		{"a tab before the colon", "GET / HTTP/1.1\r\nHost: x\r\nX-A\t: 1\r\n\r\n", refused(400), nil},
		{"a space before the colon of Transfer-Encoding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\nContent-Length: 3\r\n\r\nabc", refused(400), nil},
		{"NUL in a value", "GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", refused(400), nil},
		{"SOH in a value", "GET / HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n", refused(400), nil},
		{"ESC in a value", "GET / HTTP/1.1\r\nHost: x\r\nX: a\x1bb\r\n\r\n", refused(400), nil},
		{"DEL in a value", "GET / HTTP/1.1\r\nHost: x\r\nX: a\x7fb\r\n\r\n", refused(400), nil},
		{"NUL in a name", "GET / HTTP/1.1\r\nHost: x\r\nX\x00A: 1\r\n\r\n", refused(400), nil},
		{"an empty field name", "GET / HTTP/1.1\r\nHost: x\r\n: 1\r\n\r\n", refused(400), nil},
		{"a field line without a colon", "GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", refused(400), nil},
		{"a method that is not a token", "G(T / HTTP/1.1\r\nHost: x\r\n\r\n", refused(400), nil},
		{"two spaces in the request line", "GET  / HTTP/1.1\r\nHost: x\r\n\r\n", refused(400), nil},
		{"a space inside the target", "GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", refused(400), nil},
		{"a lowercase version", "GET / http/1.1\r\nHost: x\r\n\r\n", refused(400), nil},
		{"no version", "GET /\r\nHost: x\r\n\r\n", refused(400), nil},
		{"two Host fields", "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", refused(400), nil},
		{"an HTTP/1.1 request without Host", "GET / HTTP/1.1\r\n\r\n", refused(400), nil},
		{"an absolute-form target without Host", "GET http://x/ HTTP/1.1\r\n\r\n", refused(400), nil},
		{"HTAB and obs-text in a value pass", "GET /ok HTTP/1.1\r\nHost: x\r\nX: a\tb\xffc\r\n\r\n", served(true, "GET /ok"), nil},
	})
}

// Tests smuggling attempts over raw sockets: a request whose body framing two parsers could
// read two ways is refused and closes its connection, and nothing after it is read; where
// net/http takes Transfer-Encoding over Content-Length, the proxy re-frames the body and the
// backend never sees both.
func TestHostileFramingIsRefused(t *testing.T) {
	t.Parallel()
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	clte := fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", 5+len(smuggled), smuggled)
	chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled)
	tecl := "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk
	teOnly := func(te string) string {
		return "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + te + "\r\nContent-Length: 3\r\n\r\nabc"
	}
	cleTE := served(true, "POST /", "GET /smuggled")
	teCL := served(true, "POST / "+smuggled)
	run(t, dataplane.Options{}, []codecCase{
		{"CL.TE: Content-Length covering a smuggled request after a chunked end", clte, refused(400), &cleTE},
		{"TE.CL: a chunk holding a smuggled request, Content-Length short of it", tecl, refused(400), &teCL},
		{"TE.TE: xchunked", teOnly("xchunked"), refused(501), nil},
		{"TE.TE: chunked then identity", teOnly("chunked, identity"), refused(501), nil},
		{"TE.TE: identity then chunked", teOnly("identity, chunked"), refused(501), nil},
		{"TE.TE: a quoted chunked", teOnly(`"chunked"`), refused(501), nil},
		{"TE.TE: a vertical tab before chunked", teOnly("\x0bchunked"), refused(400), nil},
		{"TE.TE: two Transfer-Encoding fields", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n", refused(501), nil},
		{"TE.TE: chunked twice", teOnly("chunked, chunked"), refused(501), nil},
		{"Transfer-Encoding in HTTP/1.0", "POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", refused(400), &outcome{statuses: []int{200}, backend: []string{"POST / abc"}}},
		{"a Content-Length list", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc", refused(400), nil},
		{"a Content-Length list of different lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 30\r\n\r\nabc", refused(400), nil},
		{"equal duplicate Content-Lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", refused(400), &outcome{statuses: []int{200}, open: true, backend: []string{"POST / abc"}}},
		{"a signed Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc", refused(400), nil},
		{"a negative Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\nabc", refused(400), nil},
		{"a hexadecimal Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x3\r\n\r\nabc", refused(400), nil},
		{"a Content-Length that overflows", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\nabc", refused(400), nil},
		{"an empty Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\n", refused(400), nil},
		{"Content-Length: chunked", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: chunked\r\n\r\nabc", refused(400), nil},
	})
}

// Tests that nothing pipelined behind a refused request is read: a refusal that closes the
// connection leaves the request behind it unread, and the backend never receives it. A 405,
// which refuses the method and not the framing, keeps the connection, and the next request is
// served in step.
func TestNothingBehindARefusedRequestIsRead(t *testing.T) {
	t.Parallel()
	behind := "GET /behind HTTP/1.1\r\nHost: x\r\n\r\n"
	many := strings.Repeat("X-Many: 1\r\n", 30)
	foldedBehind := served(true, "GET /", "GET /behind")
	run(t, dataplane.Options{Forward: forward.Options{MaxRequestBodySize: 1 << 10, MaxHeaderCount: 20}}, []codecCase{
		{"behind a malformed escape", "GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n" + behind, refused(400), nil},
		{"behind an invalid Host", "GET / HTTP/1.1\r\nHost: evil@x\r\n\r\n" + behind, refused(400), nil},
		{"behind too many fields", "GET / HTTP/1.1\r\nHost: x\r\n" + many + "\r\n" + behind, refused(431), nil},
		{"behind a body over the limit announced with 100-continue", "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2000\r\n\r\n" + behind, refused(413), nil},
		{"behind a Content-Length list", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc" + behind, refused(400), nil},
		{"behind an unknown transfer coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n" + behind, refused(501), nil},
		{"behind a bare CR", "GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n" + behind, refused(400), nil},
		{"behind obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n" + behind, refused(400), &foldedBehind},
		{"behind a managed trailer", "POST / HTTP/1.1\r\nHost: x\r\nTrailer: Host\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nHost: y\r\n\r\n" + behind, refused(400), nil},
		{"behind TRACE, which keeps the connection", "TRACE / HTTP/1.1\r\nHost: x\r\n\r\n" + behind, outcome{statuses: []int{405, 200}, open: true, backend: []string{"GET /behind"}}, nil},
	})
}

// Tests chunked bodies over raw sockets: a chunk size that overflows, a chunk line ended by a
// bare LF or holding a control byte, and chunk data of the wrong length never reach the
// backend whole, and the client gets 400.
func TestHostileChunkedBodies(t *testing.T) {
	t.Parallel()
	chunked := func(body string) string {
		return "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body
	}
	cut := outcome{statuses: []int{400}, backend: []string{"cut: POST /"}}
	extServed := served(true, "POST / abc")
	run(t, dataplane.Options{}, []codecCase{
		{"a well-formed body with an extension and a trailer", chunked("3;name=value\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n"), served(true, "POST / abc"), nil},
		{"a chunk size that overflows", chunked("fffffffffffffffff1\r\nabc\r\n0\r\n\r\n"), cut, nil},
		{"a chunk size of 17 hex digits", chunked("10000000000000000\r\nabc\r\n0\r\n\r\n"), cut, nil},
		{"a chunk size that is no number", chunked("xyz\r\nabc\r\n0\r\n\r\n"), cut, nil},
		{"a chunk line ended by a bare LF", chunked("3\nabc\r\n0\r\n\r\n"), cut, nil},
		{"chunk data ended by a bare LF", chunked("3\r\nabc\n0\r\n\r\n"), cut, nil},
		{"the last chunk line ended by a bare LF", chunked("3\r\nabc\r\n0\n\r\n"), cut, nil},
		{"chunk data longer than its size", chunked("3\r\nabcdef\r\n0\r\n\r\n"), cut, nil},
		{"a control byte in a chunk extension", chunked("3;a\x01b\r\nabc\r\n0\r\n\r\n"), cut, &extServed},
		{"a bare CR in a chunk extension", chunked("3;a\rb\r\nabc\r\n0\r\n\r\n"), cut, nil},
		{"a trailer announcing Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nTrailer: Content-Length\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nContent-Length: 9\r\n\r\n", refused(400), nil},
	})
}

// Tests absolute-form, OPTIONS *, HTTP/1.0 with and without keep-alive, and the Expect
// variants over raw sockets.
func TestRequestFormsAndVersions(t *testing.T) {
	t.Parallel()
	run(t, dataplane.Options{Forward: forward.Options{MaxRequestBodySize: 1 << 10}}, []codecCase{
		{"an absolute-form target with a different Host routes and forwards the target's host", "GET http://a.example/p?q HTTP/1.1\r\nHost: b.example\r\n\r\n", served(true, "GET /p?q host=a.example"), nil},
		{"an absolute-form target with a port", "GET http://a.example:8080/p HTTP/1.1\r\nHost: b.example\r\n\r\n", served(true, "GET /p host=a.example:8080"), nil},
		{"OPTIONS * is answered by the proxy, in step", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n", outcome{statuses: []int{200, 200}, open: true, backend: []string{"GET /after"}}, nil},
		{"an asterisk target of another method", "GET * HTTP/1.1\r\nHost: x\r\n\r\n", refused(400), nil},
		{"HTTP/1.0 closes after its answer", "GET /10 HTTP/1.0\r\nHost: x\r\n\r\n", served(false, "GET /10"), nil},
		{"HTTP/1.0 with keep-alive stays open", "GET /10 HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", served(true, "GET /10"), nil},
		{"HTTP/1.0 with a body", "POST /10 HTTP/1.0\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", served(false, "POST /10 abc"), nil},
		{"HTTP/1.1 with Connection: close closes", "GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", served(false, "GET /c"), nil},
		{"Expect: 100-continue gets 100 then the answer", "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc", outcome{statuses: []int{100, 200}, open: true, backend: []string{"POST /e abc"}}, nil},
		{"Expect: 100-Continue is the same expectation", "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\nabc", outcome{statuses: []int{100, 200}, open: true, backend: []string{"POST /e abc"}}, nil},
		{"Expect: 100-continue without a body gets no 100", "GET /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n", served(true, "GET /e"), nil},
		{"Expect: 100-continue in HTTP/1.0 is ignored", "POST /e HTTP/1.0\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc", served(false, "POST /e abc"), nil},
		{"an unknown expectation gets 417", "POST /e HTTP/1.1\r\nHost: x\r\nExpect: something\r\nContent-Length: 3\r\n\r\nabc", refused(417), nil},
		{"Expect: 100-continue over the body limit gets 413", "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2000\r\n\r\n", refused(413), nil},
	})
}

// everyByte returns raw split in two at every byte boundary.
func everyByte(raw string) [][]string {
	out := make([][]string, 0, len(raw))
	for i := 1; i < len(raw); i++ {
		out = append(out, []string{raw[:i], raw[i:]})
	}
	return out
}

// Tests that the verdict on a request does not depend on how its bytes are split into reads:
// valid requests with bodies split in two at every byte boundary are each served whole on one
// keep-alive connection, and smuggling attempts split the same way get their verdict at every
// split.
func TestRequestsSplitAtEveryByte(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"POST /split?q=1 HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nContent-Length: 5\r\n\r\nhello",
		"POST /split?q=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;e=1\r\nhel\r\n2\r\nlo\r\n0\r\nX-T: 2\r\n\r\n",
	} {
		t.Run("valid "+strings.Fields(raw)[0]+" "+framingOf(raw), func(t *testing.T) {
			t.Parallel()
			proxy, rec := recordingProxy(t, dataplane.Options{})
			c, br := rawConn(t, proxy)
			splits := everyByte(raw)
			for _, pieces := range splits {
				writeSplit(t, c, pieces...)
				got, err := readResponses(br, 1)
				if err != nil || got[0].Status != 200 || got[0].Body != "POST /split?q=1 5" {
					t.Fatalf("split at %d: got %+v, %v", len(pieces[0]), got, err)
				}
			}
			for i, r := range rec.requests() {
				if r.Body != "hello" || !r.Whole || r.Header.Get("X-A") != "" && r.Header.Get("X-A") != "1" {
					t.Errorf("split at %d: backend received %s", i+1, r)
				}
			}
			if n := len(rec.requests()); n != len(splits) {
				t.Errorf("backend received %d requests, want %d", n, len(splits))
			}
		})
	}
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	clte := fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", 5+len(smuggled), smuggled)
	cleTE := served(true, "POST /", "GET /smuggled")
	lf := served(true, "GET /lf")
	dup := outcome{statuses: []int{200}, open: true, backend: []string{"POST / abc"}}
	for _, tc := range []codecCase{
		{"CL.TE", clte, refused(400), &cleTE},
		{"TE.TE", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\nContent-Length: 3\r\n\r\nabc" + smuggled, refused(501), nil},
		{"equal duplicate Content-Lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", refused(400), &dup},
		{"a Content-Length list", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc" + smuggled, refused(400), nil},
		{"bare LF", "GET /lf HTTP/1.1\nHost: x\n\n", refused(400), &lf},
		{"bare CR", "GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n" + smuggled, refused(400), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy, rec := recordingProxy(t, dataplane.Options{})
			splits := everyByte(tc.raw)
			var want []string
			for _, pieces := range splits {
				tc.exchange(t, proxy, pieces)
				want = append(want, tc.expected().backend...)
				if t.Failed() {
					t.Fatalf("split at %d", len(pieces[0]))
				}
			}
			eventuallyBackend(t, rec, want)
		})
	}
}

func framingOf(raw string) string {
	if strings.Contains(raw, "chunked") {
		return "chunked"
	}
	return "content-length"
}

// headOf returns a GET head of exactly n bytes, the final empty line included, padded in one
// field.
func headOf(n int) string {
	const start = "GET /limit HTTP/1.1\r\nHost: x\r\nX-Pad: "
	return start + strings.Repeat("p", n-len(start)-4) + "\r\n\r\n"
}

// lineOf returns a GET head whose request line is n bytes long without its CRLF.
func lineOf(n int) string {
	return "GET /" + strings.Repeat("l", n-len("GET / HTTP/1.1")) + " HTTP/1.1\r\nHost: x\r\n\r\n"
}

// fieldsOf returns a GET head whose fields (Host aside) are count fields whose sizes, as the
// handler counts them (name, value and 4), add up to size.
func fieldsOf(count, size int) string {
	var b strings.Builder
	b.WriteString("GET /limit HTTP/1.1\r\nHost: x\r\n")
	for i := range count - 1 {
		f := fmt.Sprintf("X-%03d: v", i)
		size -= len(f) + 2
		b.WriteString(f + "\r\n")
	}
	b.WriteString("X-Pad: " + strings.Repeat("p", size-len("X-Pad")-4) + "\r\n\r\n")
	return b.String()
}

// Tests each request limit hit exactly at its boundary, the head written in one piece and split
// across reads at the limit and at the 4 KiB buffer boundary: one byte or field under and at the
// limit passes, one over is refused.
func TestLimitsAtTheirBoundaries(t *testing.T) {
	t.Parallel()
	const headLimit = 1024
	// net/http lets a head run 4096 bytes over MaxHeaderBytes (its bufio slack) and a few more
	// (it accepted 5134 bytes against a limit of 1024), the native server none.
	netHTTPHead := headLimit + 4096
	ok := served(true, "GET /limit")
	body := func(n int) string {
		return fmt.Sprintf("POST /limit HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", n, strings.Repeat("b", n))
	}
	okBody := served(true, "POST /limit "+strings.Repeat("b", 1024))
	// net/http bounds the request line only by the head's limit; the native parser by 8 KiB
	// (http1.DefaultMaxRequestLine), CRLF aside.
	lineServed := func(n int) outcome {
		return served(true, strings.Fields(lineOf(n))[0]+" "+strings.Fields(lineOf(n))[1])
	}
	okLine, overLine := lineServed(8<<10), lineServed(8<<10+1)
	for _, tc := range []struct {
		name  string
		opts  dataplane.Options
		cases []codecCase
	}{
		{"the head's bytes at the listener", dataplane.Options{
			Listener: listener.Options{MaxHeaderBytes: headLimit}, Forward: forward.Options{MaxHeaderBytes: 64 << 10},
		}, []codecCase{
			{"at the limit", headOf(headLimit), ok, nil},
			{"one byte over", headOf(headLimit + 1), refused(431), &ok},
			{"at net/http's limit", headOf(netHTTPHead), refused(431), &ok},
			{"64 bytes over net/http's limit", headOf(netHTTPHead + 64), refused(431), nil},
		}},
		{"the fields' bytes and count at the handler", dataplane.Options{Forward: forward.Options{MaxHeaderBytes: 1000, MaxHeaderCount: 20}}, []codecCase{
			{"bytes at the limit", fieldsOf(1, 1000), ok, nil},
			{"bytes one over", fieldsOf(1, 1001), refused(431), nil},
			{"count at the limit", fieldsOf(20, 900), ok, nil},
			{"count one over", fieldsOf(21, 900), refused(431), nil},
		}},
		{"a field count above the codec's own default", dataplane.Options{Forward: forward.Options{MaxHeaderCount: 150}}, []codecCase{
			{"count at the limit", fieldsOf(150, 3000), ok, nil},
			{"count one over", fieldsOf(151, 3000), refused(431), nil},
		}},
		{"the request line at the native parser", dataplane.Options{}, []codecCase{
			{"a line of 8 KiB", lineOf(8 << 10), okLine, nil},
			{"a line one byte over", lineOf(8<<10 + 1), refused(414), &overLine},
		}},
		{"the 4 KiB read buffer", dataplane.Options{}, []codecCase{
			{"a head of 4095 bytes", headOf(4095), ok, nil},
			{"a head of 4096 bytes", headOf(4096), ok, nil},
			{"a head of 4097 bytes", headOf(4097), ok, nil},
			{"a head of 8193 bytes", headOf(8193), ok, nil},
		}},
		{"the body at the handler", dataplane.Options{Forward: forward.Options{MaxRequestBodySize: 1024}}, []codecCase{
			{"a body at the limit", body(1024), okBody, nil},
			{"a body one byte over", body(1025), refused(413), nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range tc.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					raw := c.raw
					head := strings.Index(raw, "\r\n\r\n") + 4
					for _, at := range [][]int{nil, {head - 1}, {head - 3}, {4096}, {headLimit, head - 2}, {head - len("X-Pad: p") - 40}} {
						t.Run(fmt.Sprintf("split at %v", at), func(t *testing.T) {
							t.Parallel()
							c.check(t, tc.opts, splitAt(raw, at...))
						})
					}
				})
			}
		})
	}
}

// Tests heads that arrive slowly: one trickled across the header deadline is closed without
// reaching the backend (any answer is a 400 or a 408), on a new connection and on a keep-alive one after
// a request, and one trickled within the deadline is served.
func TestSlowHeadsAndTheHeaderDeadline(t *testing.T) {
	t.Parallel()
	raw := "GET /slow HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\r\n"
	trickle := func(c net.Conn, s string, gap time.Duration) {
		for i := range len(s) {
			if _, err := io.WriteString(c, s[i:i+1]); err != nil {
				return
			}
			time.Sleep(gap)
		}
	}
	across := func(t *testing.T, first string) {
		proxy, rec := recordingProxy(t, dataplane.Options{Listener: listener.Options{HeaderReadTimeout: 300 * time.Millisecond, IdleTimeout: 10 * time.Second}})
		c, br := rawConn(t, proxy)
		if first != "" {
			writeSplit(t, c, first)
			if got, err := readResponses(br, 1); err != nil || got[0].Status != 200 {
				t.Fatalf("first request got %+v, %v", got, err)
			}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			trickle(c, raw, 40*time.Millisecond) // about 1.5s, five times the deadline
		}()
		// net/http answers a head cut by its deadline with 400; 408 says it better.
		got, _ := readResponses(br, 1)
		if len(got) == 1 && got[0].Status != 408 && got[0].Status != 400 {
			t.Errorf("a head across the deadline got %d", got[0].Status)
		}
		if !closedSoon(c) {
			t.Error("the connection stayed open")
		}
		_ = c.Close()
		<-done
		eventuallyBackend(t, rec, firstTargets(first))
	}
	t.Run("a new connection's head across the deadline", func(t *testing.T) {
		t.Parallel()
		across(t, "")
	})
	t.Run("a keep-alive connection's second head across the deadline", func(t *testing.T) {
		t.Parallel()
		across(t, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
	})
	t.Run("a head trickled within the deadline", func(t *testing.T) {
		t.Parallel()
		proxy, rec := recordingProxy(t, dataplane.Options{Listener: listener.Options{HeaderReadTimeout: 5 * time.Second}})
		c, br := rawConn(t, proxy)
		go trickle(c, raw, 5*time.Millisecond)
		if got, err := readResponses(br, 1); err != nil || got[0].Status != 200 {
			t.Fatalf("got %+v, %v", got, err)
		}
		eventuallyBackend(t, rec, []string{"GET /slow"})
	})
}

func firstTargets(first string) []string {
	if first == "" {
		return nil
	}
	return []string{"GET /first"}
}

package dataplane_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// abStream is one byte stream a client sends on one connection: its pieces are written one
// after another, each after pause (abTag in them replaced by the stream's own prefix); when cut
// is set the last piece holds only a part of the request it starts, and the client closes the
// connection once it read the answers to the whole requests.
type abStream struct {
	name   string
	pieces []string
	pause  time.Duration
	// heads are the stream's bytes but its body data, where the allowed differences look for
	// their features; the whole stream when empty.
	heads string
	// methods are the methods of the requests the stream holds whole, in order (an answer to
	// HEAD has no body).
	methods []string
	cut     bool
}

// raw is the stream's bytes.
func (s abStream) raw() string { return strings.Join(s.pieces, "") }

// headBytes is where the allowed differences look for their features.
func (s abStream) headBytes() string {
	if s.heads != "" {
		return s.heads
	}
	return s.raw()
}

// abAnswer is one response as the client saw it: status, the end-to-end fields (framing, hop
// by hop and Date aside) and the body.
type abAnswer struct {
	Status int
	Header string
	Body   string
	Close  bool
}

// abResult is what came of a stream on one engine: what the client got and what the backend
// received.
type abResult struct {
	answers []abAnswer
	// open says the connection served a probe in step after the stream's answers.
	open bool
	// err is how reading the answers ended early, if it did.
	err     string
	backend []string
}

// abDifference is a difference between the engines that is allowed, with its reason: it applies
// to a stream where present finds the feature in the heads, when the part of the engine it is
// about (the server or the upstream client) differs.
type abDifference struct {
	name, part, reason string
	present            func(heads string) bool
}

// abAllowed lists every difference between the nethttp and the native engines the A/B test
// accepts; docs/http1-engine.md ("The differential tests") lists the same with their reasons.
var abAllowed = []abDifference{
	{"bare LF", "server", "native refuses a bare LF line ending in the head with 400 (RFC 9112 2.2 lets a recipient accept it; a gateway that does invites smuggling); net/http accepts it", func(raw string) bool {
		return strings.Contains(strings.ReplaceAll(raw, "\r\n", ""), "\n")
	}},
	{"obs-fold", "server", "native refuses obs-fold with 400 (RFC 9112 5.2 allows either); net/http joins the lines with a space", func(raw string) bool {
		return strings.Contains(raw, "\r\n ") || strings.Contains(raw, "\r\n\t")
	}},
	{"CL and TE", "server", "native refuses a request with both Content-Length and Transfer-Encoding with 400 and closes (RFC 9112 6.1 permits it); net/http frames by chunked and drops Content-Length", func(raw string) bool {
		l := strings.ToLower(raw)
		return strings.Contains(l, "\ncontent-length:") && strings.Contains(l, "\ntransfer-encoding:")
	}},
	{"equal duplicate Content-Length", "server", "native refuses any repeated Content-Length with 400, equal or not; net/http accepts equal copies", func(raw string) bool {
		return strings.Count(strings.ToLower(raw), "\ncontent-length:") > 1
	}},
	{"chunk extension control byte", "server", "native checks the chunk extension's grammar and refuses a control byte with 400; net/http ignores extensions", func(raw string) bool {
		for _, line := range strings.Split(raw, "\r\n") {
			if i := strings.IndexByte(line, ';'); i > 0 && isHexString(line[:i]) && strings.ContainsFunc(line[i:], func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
				return true
			}
		}
		return false
	}},
	{"TE in HTTP/1.0", "server", "native refuses Transfer-Encoding in an HTTP/1.0 request with 400; net/http ignores it and frames by Content-Length", func(raw string) bool {
		return strings.Contains(raw, " HTTP/1.0\r\n") && strings.Contains(strings.ToLower(raw), "\ntransfer-encoding:")
	}},
	{"duplicate User-Agent", "client", "net/http's Transport sends only the first of several User-Agent fields; the native client forwards every copy, as it does any other field", func(heads string) bool {
		return strings.Count(strings.ToLower(heads), "\nuser-agent:") > 1
	}},
}

func isHexString(s string) bool {
	return s != "" && strings.Trim(s, "0123456789abcdefABCDEF") == ""
}

// Tests the engines against each other on whole exchanges: the same byte streams (a fixed list,
// and streams drawn from a seeded source: pipelined requests with bodies, random write splits,
// slow trickles, early closes) go to a data plane of each engine, each before a recording
// backend, and what the backend received, what the client received and whether the
// connection stayed open must be equal, or differ as abAllowed says. It builds both engines
// itself, so it runs in one pass only.
func TestEnginesAgreeOnWholeExchanges(t *testing.T) {
	if !firstPass {
		t.Skip("builds both engines itself: runs in the first pass only")
	}
	t.Parallel()
	a, aRec := recordingProxy(t, dataplane.Options{HTTP1Engine: http1.EngineNetHTTP})
	b, bRec := recordingProxy(t, dataplane.Options{HTTP1Engine: http1.EngineNative})
	seed, n := abSource()
	streams := append(fixedStreams(), randomStreams(rand.New(rand.NewPCG(seed, 1)), n)...)
	var (
		mu    sync.Mutex
		diffs = map[string]int{}
	)
	for i, s := range streams {
		t.Run(fmt.Sprintf("%03d %s", i, s.name), func(t *testing.T) {
			t.Parallel()
			ra, rb := make(chan abResult, 1), make(chan abResult, 1)
			go func() { ra <- abRun(a, aRec, s, i) }()
			go func() { rb <- abRun(b, bRec, s, i) }()
			got, want := <-rb, <-ra
			d := abCompare(want, got)
			if d == "" {
				return
			}
			allowed := allowedFor(s.headBytes(), partsOf[http1.EngineNetHTTP], partsOf[http1.EngineNative])
			if len(allowed) == 0 {
				t.Errorf("the engines differ on %q:\n%s", s.raw(), d)
				return
			}
			mu.Lock()
			for _, n := range allowed {
				diffs[n]++
			}
			mu.Unlock()
			t.Logf("allowed difference (%s) on %q:\n%s", strings.Join(allowed, ", "), s.raw(), d)
		})
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%d streams (seed %d), allowed differences seen: %v", len(streams), seed, diffs)
	})
}

// abSource returns the seed and the number of the random streams: 21 and 120, or
// COXSWAIN_AB_SEED and COXSWAIN_AB_STREAMS for a longer run (a nightly one, say).
func abSource() (seed uint64, n int) {
	seed, n = 21, 120
	if v, err := strconv.ParseUint(os.Getenv("COXSWAIN_AB_SEED"), 10, 64); err == nil {
		seed = v
	}
	if v, err := strconv.Atoi(os.Getenv("COXSWAIN_AB_STREAMS")); err == nil && v >= 0 {
		n = v
	}
	return seed, n
}

// allowedFor names the allowed differences whose feature heads have, of the parts that differ
// between a and b.
func allowedFor(heads string, a, b parts) []string {
	var out []string
	for _, d := range abAllowed {
		differ := d.part == "server" && a.server != b.server || d.part == "client" && a.client != b.client
		if differ && d.present(heads) {
			out = append(out, d.name)
		}
	}
	return out
}

// abRun sends s to proxy, whose backend is rec, and returns what came of it. The requests of
// stream i carry its number in their targets, so that rec's requests are told apart.
func abRun(proxy string, rec *recorder, s abStream, i int) abResult {
	var res abResult
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).Dial("tcp", proxy)
	if err != nil {
		res.err = err.Error()
		return res
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tag := fmt.Sprintf("/ab%03d/", i)
	go func() {
		for j, p := range s.pieces {
			p = strings.ReplaceAll(p, abTag, tag)
			if j > 0 && s.pause > 0 {
				time.Sleep(s.pause)
			}
			if _, err := io.WriteString(c, p); err != nil {
				return
			}
		}
	}()
	br := bufio.NewReader(c)
	res.answers, res.err = readAnswers(br, s.methods)
	switch {
	case s.cut:
		_ = c.Close()
	case len(res.answers) > 0 && !lastCloses(res.answers) && res.err == "":
		res.open = stayedOpen(c, br)
	}
	res.backend = rec.settledRequests(tag)
	return res
}

func lastCloses(as []abAnswer) bool { return len(as) > 0 && as[len(as)-1].Close }

// readAnswers reads the final answer to each request of methods, and the 1xx before it, until
// the connection ends or an answer cannot be read.
func readAnswers(br *bufio.Reader, methods []string) ([]abAnswer, string) {
	var out []abAnswer
	for _, m := range methods {
		for {
			resp, err := http.ReadResponse(br, &http.Request{Method: m})
			if err != nil {
				return out, errClass(err)
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			a := abAnswer{Status: resp.StatusCode, Header: endToEnd(resp.Header), Body: string(body), Close: resp.Close}
			out = append(out, ownRefusal(a))
			if err != nil {
				return out, errClass(err)
			}
			if resp.StatusCode >= 200 {
				break
			}
		}
	}
	return out, ""
}

// errClass names how a read ended: a timeout (the proxy neither answered nor closed), or a
// close. A clean close and a reset are one class: whether a close is sent as a reset depends
// on whether the proxy's socket still held bytes it had not read, which is a matter of timing
// on both engines; an answer a reset cut short differs in its body.
func errClass(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "closed"
}

// ownRefusal keeps only the status and the close of an answer the HTTP/1.1 server wrote itself
// to refuse a request before the handler saw it (the wording of those answers is each engine's
// own, an allowed difference of the list); the handler's answers are compared whole.
func ownRefusal(a abAnswer) abAnswer {
	switch a.Status {
	case http.StatusBadRequest, http.StatusExpectationFailed, http.StatusRequestHeaderFieldsTooLarge,
		http.StatusNotImplemented, http.StatusRequestURITooLong, http.StatusHTTPVersionNotSupported:
		if !strings.Contains(a.Header, "X-Seen:") {
			return abAnswer{Status: a.Status, Close: a.Close, Body: "(the server's own refusal)"}
		}
	}
	return a
}

// endToEnd formats h's fields but those that frame the message or belong to one connection,
// and Date, sorted.
func endToEnd(h http.Header) string {
	var out []string
	for k, vs := range h {
		switch k {
		case "Date", "Connection", "Keep-Alive", "Content-Length", "Transfer-Encoding":
			continue
		}
		out = append(out, k+": "+strings.Join(vs, ", "))
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// settledRequests returns the requests whose target starts with tag, each formatted with its
// fields, once no new one arrived for a while.
func (rec *recorder) settledRequests(tag string) []string {
	var last []string
	for range 20 {
		var got []string
		for _, r := range rec.requests() {
			if strings.HasPrefix(r.Target, tag) {
				got = append(got, r.String()+"\n\t"+fieldsOfRecorded(r.Header))
			}
		}
		if slices.Equal(got, last) {
			return got
		}
		last = got
		time.Sleep(20 * time.Millisecond)
	}
	return last
}

// fieldsOfRecorded formats a backend's view of the fields, names canonical, values in order. A
// request ID the proxy generated shows as "<generated>": each engine's run gets its own.
func fieldsOfRecorded(h http.Header) string {
	var out []string
	for k, vs := range h {
		if k == "X-Request-Id" && len(vs) == 1 && uuidV4.MatchString(vs[0]) {
			vs = []string{"<generated>"}
		}
		out = append(out, k+": "+strings.Join(vs, " | "))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// abCompare says how got differs from want, or "" when they agree. The requests the backend did
// not receive whole are left out: whether the head of a request whose body fails or whose
// client leaves reached the backend first depends on when each client flushes it and on timing,
// and either way the backend gets no whole request.
func abCompare(want, got abResult) string {
	var b strings.Builder
	wa, ga := want.answers, got.answers
	wb, gb := whole(want.backend), whole(got.backend)
	if want.open != got.open {
		fmt.Fprintf(&b, "open: nethttp %v, native %v\n", want.open, got.open)
	}
	if want.err != got.err {
		fmt.Fprintf(&b, "end of answers: nethttp %q, native %q\n", want.err, got.err)
	}
	if !slices.Equal(wa, ga) {
		fmt.Fprintf(&b, "answers:\n\tnethttp %+v\n\tnative  %+v\n", wa, ga)
	}
	if !slices.Equal(wb, gb) {
		fmt.Fprintf(&b, "backend received:\n\tnethttp %q\n\tnative  %q\n", wb, gb)
	}
	return b.String()
}

// whole drops the requests the backend did not receive whole.
func whole(rs []string) []string {
	var out []string
	for _, r := range rs {
		if !strings.Contains(strings.SplitN(r, "\n", 2)[0], " (cut)") {
			out = append(out, r)
		}
	}
	return out
}

package h1server

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzServerAgainstNetHTTP sends the same bytes, cut at the same point between two writes, to
// the native server and to net/http's, each with a handler that records the requests it gets
// and reads their bodies. The native server is never more lenient: the requests its handler
// got are the first of those net/http's got, equal field by field (a request whose body the
// native server refused mid-way ends the comparison).
func FuzzServerAgainstNetHTTP(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /a?b HTTP/1.1\r\nHost: a\r\nX: 1\r\nx: 2\r\n\r\nGET /2 HTTP/1.0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: X\r\n\r\n1\r\na\r\n0\r\nX: y\r\n\r\n",
		"GET http://h/p HTTP/1.1\r\nHost: x\r\nPragma: no-cache\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX : 1\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nz",
	} {
		f.Add([]byte(seed), uint16(len(seed)/2))
	}
	f.Fuzz(func(t *testing.T, raw []byte, cut uint16) {
		if len(raw) > 4096 {
			return
		}
		at := int(cut) % (len(raw) + 1)
		want, got := make(chan recorded, 64), make(chan recorded, 64)
		oracle := serveNetHTTP(t, recorder(want))
		ts := serve(t, recorder(got), Options{})
		exchangeSplit(t, oracle, raw, at)
		exchangeSplit(t, ts.ln.Addr().String(), raw, at)
		wants, gots := drain(want), drain(got)
		if len(gots) > len(wants) {
			t.Fatalf("native served %d requests, net/http %d, of %q", len(gots), len(wants), raw)
		}
		for i, g := range gots {
			w := wants[i]
			if g.BodyErr != "" {
				return // refused mid-body: stricter, and nothing after it is read
			}
			if w.BodyErr != "" {
				t.Fatalf("request %d: native read the body net/http refused (%s) of %q", i, w.BodyErr, raw)
			}
			if d := cmp.Diff(w, g); d != "" {
				t.Fatalf("request %d of %q differs (-net/http +native):\n%s", i, raw, d)
			}
		}
	})
}

func drain(ch chan recorded) []recorded {
	var rs []recorded
	for {
		select {
		case r := <-ch:
			rs = append(rs, r)
		default:
			return rs
		}
	}
}

package h1server

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// serveNetHTTP starts net/http's server with h on a loopback port, the oracle of these tests.
func serveNetHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// exchange sends raw on a new connection to addr, then half-closes, and returns every byte
// the server sent back.
func exchange(t *testing.T, addr, raw string) string {
	t.Helper()
	return exchangeSplit(t, addr, []byte(raw), len(raw))
}

// exchangeSplit is exchange with raw written in two writes, cut at at.
func exchangeSplit(t *testing.T, addr string, raw []byte, at int) string {
	t.Helper()
	c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write(raw[:at])
	_, _ = c.Write(raw[at:])
	_ = c.(*net.TCPConn).CloseWrite()
	b, _ := io.ReadAll(c)
	return string(b)
}

var dateField = regexp.MustCompile(`(?m)^Date: [^\r]*\r\n`)

// Tests that the handler gets the request net/http's server would give it for the same bytes:
// method, URL, Host, RequestURI, header (canonical keys, values in order, Host removed),
// length, transfer coding, trailers, Close and body.
func TestRequestAsNetHTTP(t *testing.T) {
	cases := map[string]string{
		"origin-form":      "GET /a/b%20c?x=1&y=%2F HTTP/1.1\r\nHost: example.com:8080\r\nuser-agent: t\r\nX-Dup: 1\r\nx-dup: 2\r\nX-DUP: 3\r\n\r\n",
		"absolute-form":    "GET http://other.example/p?q HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"asterisk":         "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"pragma":           "GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n",
		"http/1.0":         "GET /old HTTP/1.0\r\nUser-Agent: old\r\n\r\n",
		"http/1.0 keep":    "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"close":            "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
		"content-length":   "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
		"empty length":     "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
		"chunked":          "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: x-one, X-Two\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\nX-One: 1\r\nX-Three: 3\r\n\r\n",
		"chunked no trail": "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"odd names":        "GET / HTTP/1.1\r\nHost: a\r\nx_under: 1\r\nX-Weird~Name: 2\r\nempty:\r\n\r\n",
		"uppercase host":   "GET / HTTP/1.1\r\nHOST: Example.COM\r\n\r\n",
		"expect":           "PUT /e HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			want, got := make(chan recorded, 1), make(chan recorded, 1)
			oracle := serveNetHTTP(t, recorder(want))
			ts := serve(t, recorder(got), Options{})
			wantBytes := exchange(t, oracle, raw)
			gotBytes := exchange(t, ts.ln.Addr().String(), raw)
			if d := cmp.Diff(received(want), received(got)); d != "" {
				t.Errorf("request differs from net/http's (-net/http +native):\n%s", d)
			}
			wantBytes, gotBytes = dateField.ReplaceAllString(wantBytes, ""), dateField.ReplaceAllString(gotBytes, "")
			if wantBytes != gotBytes {
				t.Errorf("response bytes differ:\nnet/http %q\nnative   %q", wantBytes, gotBytes)
			}
		})
	}
}

// Tests that responses are the bytes net/http's server sends for the same handler calls.
func TestResponseAsNetHTTP(t *testing.T) {
	cases := map[string]http.HandlerFunc{
		"nothing written": func(http.ResponseWriter, *http.Request) {},
		"small body": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Add("X-B", "1")
			w.Header().Add("X-A", "2")
			_, _ = io.WriteString(w, "hello")
		},
		"length set": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "5")
			w.Header()["Content-Type"] = nil
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "hello")
		},
		"flushed": func(w http.ResponseWriter, _ *http.Request) {
			w.Header()["Content-Type"] = nil
			_, _ = io.WriteString(w, "part")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "rest")
		},
		"large": func(w http.ResponseWriter, _ *http.Request) {
			w.Header()["Content-Type"] = nil
			_, _ = io.WriteString(w, strings.Repeat("y", 3000))
		},
		"no content": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusNoContent)
		},
		"not modified": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Etag", `"x"`)
			w.WriteHeader(http.StatusNotModified)
		},
		"close": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Connection", "close")
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusBadRequest)
		},
		"trailers": func(w http.ResponseWriter, _ *http.Request) {
			w.Header()["Content-Type"] = nil
			w.Header().Set("Trailer", "X-T")
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-T", "v")
			w.Header().Set(http.TrailerPrefix+"X-P", "p")
		},
		"early hints": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Link", "</s.css>")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusOK)
		},
		"newline in value": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Bad", "a\r\nInjected: yes")
			w.Header().Set("Content-Length", "0")
		},
	}
	requests := map[string]string{
		"1.1":  "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"HEAD": "HEAD / HTTP/1.1\r\nHost: a\r\n\r\n",
		"1.0":  "GET / HTTP/1.0\r\n\r\n",
		"1.0k": "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n",
	}
	for name, h := range cases {
		for rname, raw := range requests {
			t.Run(name+"/"+rname, func(t *testing.T) {
				oracle := serveNetHTTP(t, h)
				ts := serve(t, h, Options{})
				want := dateField.ReplaceAllString(exchange(t, oracle, raw), "")
				got := dateField.ReplaceAllString(exchange(t, ts.ln.Addr().String(), raw), "")
				if name == "large" && rname == "1.1" {
					// net/http cuts its chunks at its 2 KiB buffer; the bytes of the body
					// are the same, in chunks of other sizes.
					want, got = unchunk(t, want), unchunk(t, got)
				}
				if want != got {
					t.Errorf("response bytes differ:\nnet/http %q\nnative   %q", want, got)
				}
			})
		}
	}
}

// unchunk returns a response's head and its chunked body decoded.
func unchunk(t *testing.T, raw string) string {
	t.Helper()
	head, body, _ := strings.Cut(raw, "\r\n\r\n")
	b, err := io.ReadAll(httputil.NewChunkedReader(strings.NewReader(body)))
	if err != nil {
		t.Fatalf("chunked body %q: %v", body, err)
	}
	return head + "\r\n\r\n" + string(b)
}

// received returns the request a handler recorded, nil when the server did not call it.
func received(ch <-chan recorded) *recorded {
	select {
	case r := <-ch:
		return &r
	default:
		return nil
	}
}

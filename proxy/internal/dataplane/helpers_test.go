package dataplane_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// echo is what the test backends answer: what they received.
type echo struct {
	Backend string              `json:"backend"`
	Method  string              `json:"method"`
	Host    string              `json:"host"`
	URI     string              `json:"uri"`
	Proto   string              `json:"proto"`
	Headers map[string][]string `json:"headers"`
	Body    string              `json:"body"`
}

// backend starts an HTTP/1.1 server on 127.0.0.1 that answers with an echo, after sleeping for
// the duration in the X-Sleep request header if any, and counts its requests.
func backend(t *testing.T, name string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if d, err := time.ParseDuration(r.Header.Get("X-Sleep")); err == nil {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Backend", name)
		_ = json.NewEncoder(w).Encode(echo{
			Backend: name, Method: r.Method, Host: r.Host, URI: r.RequestURI, Proto: r.Proto, Headers: r.Header, Body: string(body),
		})
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func hostPort(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }

// start returns a data plane binding every table port to an ephemeral port on 127.0.0.1, shut
// down when the test ends, serving with the pass's HTTP/1.1 engine unless opts names one.
func start(t *testing.T, opts dataplane.Options) *dataplane.DataPlane {
	t.Helper()
	opts = withEngine(opts)
	nameEngineOnFailure(t, opts.HTTP1Engine)
	opts.Listener.Address = func(uint32) string { return "127.0.0.1:0" }
	if opts.Listener.DrainTimeout == 0 {
		opts.Listener.DrainTimeout = 2 * time.Second
	}
	d, err := dataplane.New(logger(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// fasthttp counts a connection that has not sent a request yet as busy for its first
		// five seconds, so a drain may take that long.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return d
}

func logger(t *testing.T) logr.Logger { return testr.NewWithOptions(t, testr.Options{Verbosity: 0}) }

var version atomic.Int64

// apply applies a set made of msgs.
func apply(t *testing.T, d *dataplane.DataPlane, msgs ...proto.Message) {
	t.Helper()
	v := fmt.Sprintf("v%d", version.Add(1))
	if err := d.Apply(context.Background(), snaptest.Set(t, v, msgs...)); err != nil {
		t.Fatalf("apply %s: %v", v, err)
	}
}

func addr(t *testing.T, d *dataplane.DataPlane, port uint32) string {
	t.Helper()
	a, ok := d.Addr(port)
	if !ok {
		t.Fatalf("port %d is not bound", port)
	}
	return a
}

// client returns an HTTP/1.1 client that sends every request to addr, whatever the URL's host.
func client(addr string) *http.Client {
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, network, addr)
			},
			DisableCompression: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// tlsClient returns a client that dials addr with TLS, trusting nothing but accepting any
// certificate, and records the leaf served and the protocol negotiated.
func tlsClient(addr string, h2 bool, served *atomic.Pointer[tls.ConnectionState]) *http.Client {
	dialer := &tls.Dialer{Config: &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // the test checks which certificate was served
		NextProtos:         []string{"h2", "http/1.1"},
	}}
	if !h2 {
		dialer.Config.NextProtos = []string{"http/1.1"}
	}
	tr := &http.Transport{
		DialTLSContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(a)
			cfg := dialer.Config.Clone()
			cfg.ServerName = host
			c, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, network, addr)
			if err == nil {
				st := c.(*tls.Conn).ConnectionState()
				served.Store(&st)
			}
			return c, err
		},
		ForceAttemptHTTP2: h2,
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

type response struct {
	status int
	header http.Header
	echo   echo
	body   string
}

// get sends a request and decodes the echo when there is one.
func do(t *testing.T, c *http.Client, method, url string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Add(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := response{status: resp.StatusCode, header: resp.Header, body: string(body)}
	_ = json.Unmarshal(body, &out.echo)
	return out
}

// eventually polls cond every 10ms until it holds or 5s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ms(n int64) *durationpb.Duration { return durationpb.New(time.Duration(n) * time.Millisecond) }

func listenOn127() listener.Options {
	return listener.Options{Address: func(uint32) string { return "127.0.0.1:0" }}
}

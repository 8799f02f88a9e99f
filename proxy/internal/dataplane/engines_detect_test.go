package dataplane_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// parts names what really serves each side of HTTP/1.1 in a pass: the server that parses the
// clients' requests and the client that speaks to the backends. A part the native engine has
// not taken over yet is net/http whatever the option says; the expectations of a behaviour only
// one engine has follow the part that runs, so that the suite stays true while the native parts
// land one by one.
type parts struct {
	server, client http1.Engine
}

// partsOf holds the parts of each engine, found by detectParts before the passes, and running
// those of the pass's engine.
var (
	partsOf = map[http1.Engine]parts{}
	running parts
)

// String says which parts run, for the banner of a pass.
func (p parts) String() string {
	return fmt.Sprintf("server %s, upstream client %s", p.server, p.client)
}

// detectParts finds which implementation serves each part of engine e: it sends one request
// through a data plane of e to a raw backend over a connection it keeps open, and looks among
// the goroutines for net/http's server connection loop and its Transport's read loop, which
// only net/http runs.
func detectParts(e http1.Engine) (parts, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return parts{}, err
	}
	defer func() { _ = ln.Close() }()
	go serveOK(ln)
	d, err := dataplane.New(logr.Discard(), dataplane.Options{HTTP1Engine: e, Listener: listenOn127()})
	if err != nil {
		return parts{}, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.Shutdown(ctx)
	}()
	tb := &mainTB{}
	set := snaptest.Set(tb, "detect", snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/"), "ns/app:80"))),
		snaptest.Cluster(tb, "ns/app:80", ln.Addr().String()))
	if tb.err != nil {
		return parts{}, tb.err
	}
	if err := d.Apply(context.Background(), set); err != nil {
		return parts{}, err
	}
	proxy, _ := d.Addr(80)
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(context.Background(), "tcp", proxy)
	if err != nil {
		return parts{}, err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return parts{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return parts{}, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		return parts{}, fmt.Errorf("detect the parts of %s: got %d", e, resp.StatusCode)
	}
	stacks := goroutines()
	p := parts{server: http1.EngineNative, client: http1.EngineNative}
	if strings.Contains(stacks, "net/http.(*conn).serve") {
		p.server = http1.EngineNetHTTP
	}
	if strings.Contains(stacks, "net/http.(*persistConn).readLoop") {
		p.client = http1.EngineNetHTTP
	}
	return p, nil
}

// serveOK answers every request on every connection of ln with 200, over raw sockets.
func serveOK(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			br := bufio.NewReader(c)
			for {
				r, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
					return
				}
			}
		}()
	}
}

func goroutines() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// mainTB is the testing.TB snaptest needs outside a test: it keeps the first failure.
type mainTB struct {
	testing.TB
	err error
}

func (m *mainTB) Helper() {}

func (m *mainTB) Fatal(args ...any) {
	if m.err == nil {
		m.err = errors.New(fmt.Sprint(args...))
	}
}

// skipOnServer skips t where requests are served by e: for a behaviour only the other engine's
// server has, said by reason.
func skipOnServer(t *testing.T, e http1.Engine, reason string) {
	t.Helper()
	if running.server == e {
		t.Skipf("not where the %s engine serves: %s", e, reason)
	}
}

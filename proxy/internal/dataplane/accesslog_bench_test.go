package dataplane_test

import (
	"context"
	"math"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/accesslog"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// BenchmarkServeAccessLog is BenchmarkServe's exchange with the access log and request IDs in
// each of their settings, for each HTTP/1.1 engine, so that their cost reads as ratios of one
// run: ids=off,log=off is the bare request path; log=off the default request ID alone (the
// request brings none, so one is generated); log=json and log=text every field written to
// /dev/null by the log's own goroutine, through its real write system calls.
func BenchmarkServeAccessLog(b *testing.B) {
	backendAddr := benchBackend(b)
	json := accesslog.Options{Format: accesslog.FormatJSON}
	text := accesslog.Options{Format: accesslog.FormatText}
	cases := []struct {
		name  string
		noIDs bool
		log   *accesslog.Options
	}{
		{"ids=off,log=off", true, nil},
		{"log=off", false, nil},
		{"log=json", false, &json},
		{"log=text", false, &text},
	}
	for _, e := range http1.Engines {
		for _, tc := range cases {
			b.Run("engine="+string(e)+"/"+tc.name, func(b *testing.B) {
				opts := dataplane.Options{
					HTTP1Engine: e, Listener: listenOn127(),
					Forward: forward.Options{MaxRequestsPerConnection: math.MaxInt32, NoRequestID: tc.noIDs},
				}
				if tc.log != nil {
					devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = devNull.Close() })
					opts.AccessLog, opts.AccessLogOptions = devNull, *tc.log
				}
				benchExchanges(b, benchPlane(b, opts, backendAddr))
			})
		}
	}
}

// benchPlane starts a data plane with opts routing everything to backendAddr and returns its
// address.
func benchPlane(b *testing.B, opts dataplane.Options, backendAddr string) string {
	b.Helper()
	d, err := dataplane.New(logr.Discard(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.Shutdown(ctx)
	})
	set := snaptest.Set(b, "bench", snaptest.HTTP("bench/gw", 80, snaptest.VHost("http", "", snaptest.Route("bench/r/0/0", "", snaptest.Prefix("/"), "bench/app:80"))),
		snaptest.Cluster(b, "bench/app:80", backendAddr))
	if err := d.Apply(context.Background(), set); err != nil {
		b.Fatal(err)
	}
	proxy, _ := d.Addr(80)
	return proxy
}

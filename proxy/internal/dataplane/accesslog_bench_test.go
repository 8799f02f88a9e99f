package dataplane_test

import (
	"context"
	"math"
	"os"
	"syscall"
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
// /dev/null by the log's own goroutine, through its real write system calls. cpu-ns/op is the
// CPU time of the whole test process (client, proxy, log writer and backend) per exchange: on a
// shared machine it varies less than ns/op, and it counts the log's goroutine, which ns/op
// does not when a core is free for it.
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
				proxy := benchPlane(b, opts, backendAddr)
				before := cpuTime(b)
				benchExchanges(b, proxy)
				b.ReportMetric(float64(cpuTime(b)-before)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// cpuTime returns the user and system CPU time the process used so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

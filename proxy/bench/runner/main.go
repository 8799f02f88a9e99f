// Command runner measures the data plane against nginx (and, in the first scenario, haproxy
// and a minimal net/http proxy) on loopback: for each scenario it starts one backend, then
// each proxy pinned alone to one core with one worker, drives it from the other core with wrk
// or h2load (closed loop, for CPU time per request) and vegeta or h2load (fixed rate, for
// CPU time per request and latency at the same rate for every proxy), reads the proxy's CPU
// time and memory from /proc/<pid>, and prints Markdown tables whose headline is the proxy's
// CPU time per request as a ratio to nginx's, followed by the data plane's standing against
// its targets. The data plane runs once per HTTP/1.1 engine (coxswain-native and
// coxswain-nethttp), so both engines and nginx are measured in the same run. Where a
// scenario asks for it, the runner also holds idle keep-alive connections open and reads the
// memory they cost, and counts the proxy's system calls per request under strace.
//
// It fails instead of printing a figure when a measurement is missing (a proxy that exited,
// no completed request, no CPU time, no memory figure, no system call count), when errors
// exceed -max-errors of the requests, or when a benchmark port is held by another process.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

type options struct {
	bin       string
	vegeta    string
	work      string
	out       string
	profiles  string
	duration  time.Duration
	warmup    time.Duration
	rounds    int
	maxErrors float64
	proxyCPU  string
	loadCPU   string
	quick     bool
	only      string
	scenarios string
}

// scenario is one routing table, request shape and body size, measured for each of its
// proxies.
type scenario struct {
	name   string
	routes int
	// body is the size of the backend's response body; upload, when set, the size of the
	// request body each request POSTs.
	body, upload int
	// tls serves HTTPS; h2 makes it HTTP/2 over TLS (h2load); handshake sends Connection:
	// close so every request pays a TLS handshake.
	tls, h2, handshake bool
	// idle is the number of idle keep-alive connections held open across the measurement.
	idle int
	// rate is the fixed rate of the latency run, requests per second.
	rate int
	// flat marks the download scenarios whose peak RSS must stay within 10% of each other.
	flat bool
	// syscalls counts the proxy's system calls per request under strace.
	syscalls bool
	proxies  []string
}

const (
	kib = 1 << 10
	mib = 1 << 20
)

// cpuTarget is the data plane's CPU time per request as a multiple of nginx's: 1.10 in
// every scenario, 1.00 with bodies of 16 KiB and larger, 1.50 over HTTP/2, which stays on Go's
// HTTP/2 server.
func (s scenario) cpuTarget() float64 {
	switch {
	case s.h2:
		return 1.50
	case s.body >= 16*kib || s.upload >= 16*kib:
		return 1.00
	}
	return 1.10
}

// The data plane's benchmark proxies: one per HTTP/1.1 engine, and the native engine with its
// access log on.
const (
	coxswainNative    = "coxswain-native"
	coxswainNetHTTP   = "coxswain-nethttp"
	coxswainAccessLog = "coxswain-native+accesslog"
)

// coxswains are the data plane's proxies judged against the targets, in the order reported.
var coxswains = []string{coxswainNative, coxswainNetHTTP}

func scenarios() []scenario {
	both := []string{"nginx", coxswainNative, coxswainNetHTTP}
	return []scenario{
		{
			name: "1 route, 100 B", routes: 1, body: 100, rate: 4000, syscalls: true,
			proxies: []string{"nginx", "haproxy", "nethttp-minimal", coxswainNative, coxswainNetHTTP, coxswainAccessLog},
		},
		{name: "1,000 routes, 100 B", routes: 1000, body: 100, rate: 4000, proxies: both},
		{name: "10,000 routes, 100 B", routes: 10000, body: 100, rate: 4000, proxies: both},
		{name: "1 route, 16 KiB", routes: 1, body: 16 * kib, rate: 4000, flat: true, syscalls: true, proxies: both},
		{
			name: "1 route, 1 MiB download", routes: 1, body: mib, rate: 100, flat: true,
			proxies: []string{"nginx", "nethttp-minimal", coxswainNative, coxswainNetHTTP},
		},
		{name: "1 route, 100 MiB download", routes: 1, body: 100 * mib, rate: 2, flat: true, proxies: both},
		{name: "1 route, 1 MiB upload", routes: 1, body: 100, upload: mib, rate: 100, proxies: both},
		{name: "1 route, 100 MiB upload", routes: 1, body: 100, upload: 100 * mib, rate: 2, proxies: both},
		{name: "1 route, 100 B, TLS", routes: 1, body: 100, tls: true, rate: 4000, proxies: both},
		{name: "1 route, 100 B, HTTP/2 over TLS", routes: 1, body: 100, tls: true, h2: true, rate: 4000, proxies: both},
		{name: "1 route, 100 B, TLS handshake per request", routes: 1, body: 100, tls: true, handshake: true, rate: 300, proxies: both},
		{name: "1 route, 100 B, 10,000 idle connections", routes: 1, body: 100, idle: 10000, rate: 4000, proxies: both},
	}
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin", "directory holding bench-backend, bench-coxswain and bench-minimal")
	flag.StringVar(&o.vegeta, "vegeta", "bin/vegeta", "vegeta binary")
	flag.StringVar(&o.work, "work", "", "scratch directory for configs and logs (a new temporary one when empty)")
	flag.StringVar(&o.out, "out", "", "also write the Markdown report to this file")
	flag.StringVar(&o.profiles, "profiles", "", "directory for CPU profiles of coxswain in every scenario above target (none when empty)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each measured run")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "length of the warm-up before each measured run")
	flag.StringVar(&o.proxyCPU, "proxy-cpu", "0", "CPU the proxy is pinned to")
	flag.StringVar(&o.loadCPU, "load-cpu", "1", "CPU the load generator and backend are pinned to")
	flag.IntVar(&o.rounds, "rounds", 2, "closed-loop runs per proxy, interleaved across the scenario's proxies; the median CPU time per request is reported")
	flag.Float64Var(&o.maxErrors, "max-errors", 0.0001, "fraction of requests that may fail (non-2xx, socket errors, timeouts) before a scenario fails")
	flag.BoolVar(&o.quick, "quick", false, "run the first scenario only")
	flag.StringVar(&o.only, "only", "", "comma-separated proxies to run, a name also selecting its variants (coxswain: every engine); nginx always runs: it is the baseline; all when empty")
	flag.StringVar(&o.scenarios, "scenarios", "", "comma-separated substrings; run only the scenarios whose name holds one (all when empty)")
	flag.Parse()
	if err := run(&o); err != nil {
		fmt.Fprintln(os.Stderr, "runner: FAILED:", err)
		os.Exit(1)
	}
}

func run(o *options) error {
	if o.work == "" {
		dir, err := os.MkdirTemp("", "coxswain-bench-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		o.work = dir
	}
	var err error
	if o.bin, err = filepath.Abs(o.bin); err != nil {
		return err
	}
	if o.vegeta, err = filepath.Abs(o.vegeta); err != nil {
		return err
	}
	if err := checkPortsFree(benchAddrs...); err != nil {
		return err
	}
	if err := writeCertificate(o.work); err != nil {
		return err
	}
	loadBefore, err := loadAverage()
	if err != nil {
		return err
	}
	started := time.Now()
	var results []result
	var ran []scenario
	for _, s := range o.selected() {
		s.proxies = o.filter(s.proxies)
		rs, err := runScenario(o, s)
		if err != nil {
			return fmt.Errorf("scenario %q: %w", s.name, err)
		}
		results = append(results, rs...)
		ran = append(ran, s)
	}
	loadAfter, err := loadAverage()
	if err != nil {
		return err
	}
	rep := report{o: o, started: started, loadBefore: loadBefore, loadAfter: loadAfter, scenarios: ran, results: results}
	if o.profiles != "" {
		if err := profileMisses(o, &rep); err != nil {
			return err
		}
	}
	text := rep.markdown()
	fmt.Print(text)
	if o.out != "" {
		return os.WriteFile(o.out, []byte(text), 0o600)
	}
	return nil
}

// runScenario measures every proxy of s against one backend, then counts their system calls
// when s asks for it.
func runScenario(o *options, s scenario) ([]result, error) {
	backend, err := startBackend(o, s.body)
	if err != nil {
		return nil, err
	}
	defer backend.stop()
	out := make([]result, len(s.proxies))
	for round := range o.rounds {
		for i, name := range s.proxies {
			fmt.Fprintf(os.Stderr, "== %s: %s (round %d)\n", s.name, name, round+1)
			r, err := measure(o, s, name)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out[i].merge(r, round == 0)
		}
	}
	if !s.syscalls {
		return out, nil
	}
	for i, name := range s.proxies {
		fmt.Fprintf(os.Stderr, "== %s: %s (system calls)\n", s.name, name)
		sc, err := traceSyscalls(o, s, name)
		if err != nil {
			return nil, fmt.Errorf("%s: system calls: %w", name, err)
		}
		out[i].sys = &sc
	}
	return out, nil
}

// selected returns the scenarios to run: the first with -quick, those -scenarios names, or all.
func (o *options) selected() []scenario {
	all := scenarios()
	if o.quick {
		return all[:1]
	}
	if o.scenarios == "" {
		return all
	}
	var keep []scenario
	for _, s := range all {
		for _, want := range strings.Split(o.scenarios, ",") {
			if want != "" && strings.Contains(s.name, want) {
				keep = append(keep, s)
				break
			}
		}
	}
	return keep
}

// filter keeps nginx and the proxies -only names; a name also keeps its variants, so
// "coxswain" keeps coxswain-native, coxswain-nethttp and coxswain-native+accesslog.
func (o *options) filter(proxies []string) []string {
	if o.only == "" {
		return proxies
	}
	keep := strings.Split(o.only, ",")
	return slices.DeleteFunc(slices.Clone(proxies), func(p string) bool {
		return p != "nginx" && !slices.ContainsFunc(keep, func(k string) bool {
			return k != "" && (p == k || strings.HasPrefix(p, k+"-") || strings.HasPrefix(p, k+"+"))
		})
	})
}

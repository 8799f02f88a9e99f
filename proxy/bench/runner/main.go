// Command runner measures the data plane against nginx and haproxy on loopback: for each
// scenario it starts one backend, then each proxy pinned alone to one core with one worker,
// drives it from the other core with wrk (closed loop, for CPU time per request) and vegeta
// (fixed rate, for latency), reads the proxy's CPU time from /proc/<pid>/stat, and prints a
// Markdown table whose headline is the proxy's CPU time per request as a ratio to nginx's.
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
	bin      string
	vegeta   string
	work     string
	out      string
	duration time.Duration
	warmup   time.Duration
	rate     int
	rounds   int
	proxyCPU string
	loadCPU  string
	quick    bool
	only     string
}

// scenario is one routing table and body size, measured for each of its proxies.
type scenario struct {
	name    string
	routes  int
	body    int
	tls     bool
	proxies []string
}

func scenarios(quick bool) []scenario {
	all := []scenario{
		{name: "1 route, 100 B", routes: 1, body: 100, proxies: []string{"nginx", "haproxy", "fasthttp-minimal", "coxswain", "coxswain+accesslog"}},
		{name: "1,000 routes, 100 B", routes: 1000, body: 100, proxies: []string{"nginx", "coxswain"}},
		{name: "10,000 routes, 100 B", routes: 10000, body: 100, proxies: []string{"nginx", "coxswain"}},
		{name: "1 route, 16 KiB", routes: 1, body: 16 << 10, proxies: []string{"nginx", "coxswain"}},
		{name: "1 route, 100 B, TLS", routes: 1, body: 100, tls: true, proxies: []string{"nginx", "coxswain"}},
	}
	if quick {
		return all[:1]
	}
	return all
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin", "directory holding bench-backend and bench-coxswain")
	flag.StringVar(&o.vegeta, "vegeta", "bin/vegeta", "vegeta binary")
	flag.StringVar(&o.work, "work", "", "scratch directory for configs and logs (a new temporary one when empty)")
	flag.StringVar(&o.out, "out", "", "also write the Markdown report to this file")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each measured run")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "length of the warm-up before each measured run")
	flag.IntVar(&o.rate, "rate", 4000, "fixed vegeta rate, requests per second: far below what nginx sustains, and what vegeta "+
		"itself sustains on the core it shares with the backend")
	flag.StringVar(&o.proxyCPU, "proxy-cpu", "0", "CPU the proxy is pinned to")
	flag.StringVar(&o.loadCPU, "load-cpu", "1", "CPU the load generator and backend are pinned to")
	flag.IntVar(&o.rounds, "rounds", 2, "closed-loop runs per proxy, interleaved across the scenario's proxies; the median CPU time per request is reported")
	flag.BoolVar(&o.quick, "quick", false, "run the first scenario only")
	flag.StringVar(&o.only, "only", "", "comma-separated proxies to run (nginx always runs: it is the baseline); all when empty")
	flag.Parse()
	if err := run(&o); err != nil {
		fmt.Fprintln(os.Stderr, "runner:", err)
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
	if err := writeCertificate(o.work); err != nil {
		return err
	}
	var results []result
	for _, s := range scenarios(o.quick) {
		s.proxies = o.filter(s.proxies)
		rs, err := runScenario(o, s)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", s.name, err)
		}
		results = append(results, rs...)
	}
	report := markdown(o, results)
	fmt.Print(report)
	if o.out != "" {
		return os.WriteFile(o.out, []byte(report), 0o600)
	}
	return nil
}

// runScenario measures every proxy of s against one backend.
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
			r, err := measure(o, s, name, round == 0)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out[i].merge(r, round == 0)
		}
	}
	return out, nil
}

// filter keeps nginx and the proxies -only names.
func (o *options) filter(proxies []string) []string {
	if o.only == "" {
		return proxies
	}
	keep := strings.Split(o.only, ",")
	return slices.DeleteFunc(slices.Clone(proxies), func(p string) bool { return p != "nginx" && !slices.Contains(keep, p) })
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// result is one proxy in one scenario.
type result struct {
	scenario string
	proxy    string
	requests int64
	non2xx   int64
	rps      float64
	cpuUS    float64
	// cpuRounds holds the CPU time per request of every round; cpuUS is their median.
	cpuRounds []float64
	wrkP50    string
	wrkP99    string
	rssMiB    float64
	rate      int
	fixed     fixedResult
}

type fixedResult struct {
	p50, p99 time.Duration
	failed   int64
}

// target returns the URL and Host of the request each run sends: the middle route.
func target(s scenario) (url, host string) {
	host, path := scaleTarget(s.routes / 2)
	if s.tls {
		return "https://" + httpsAddr + path + "/items", host
	}
	return "http://" + httpAddr + path + "/items", host
}

// measure starts the proxy, warms it up, runs wrk while reading its CPU time, then vegeta at
// the fixed rate, and stops the proxy.
func measure(o *options, s scenario, name string, withFixedRate bool) (result, error) {
	r := result{scenario: s.name, proxy: name, rate: o.rate}
	p, err := startProxy(o, s, name)
	if err != nil {
		return r, err
	}
	defer p.stop()
	if _, err := wrk(o, s, o.warmup); err != nil {
		return r, err
	}
	before, err := p.cpuTicks()
	if err != nil {
		return r, err
	}
	out, err := wrk(o, s, o.duration)
	if err != nil {
		return r, err
	}
	after, err := p.cpuTicks()
	if err != nil {
		return r, err
	}
	parseWrk(&r, out)
	if r.requests > 0 {
		r.cpuUS = float64(after-before) / clockTicks() * 1e6 / float64(r.requests)
	}
	r.rssMiB = p.rssMiB()
	r.cpuRounds = []float64{r.cpuUS}
	if withFixedRate {
		r.fixed, err = fixedRate(o, s, o.rate)
	}
	return r, err
}

func wrk(o *options, s scenario, d time.Duration) (string, error) {
	url, host := target(s)
	secs := strconv.Itoa(int(d.Seconds()))
	//nolint:gosec // runs the benchmark tools with the operator's flags
	cmd := exec.CommandContext(context.Background(), "taskset", "-c", o.loadCPU,
		"wrk", "-t1", "-c64", "-d"+secs+"s", "--latency", "-H", "Host: "+host, url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("wrk: %w: %s", err, out)
	}
	return string(out), nil
}

var (
	wrkRequests = regexp.MustCompile(`(\d+) requests in`)
	wrkRPS      = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkErrors   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkP50      = regexp.MustCompile(`\s50%\s+(\S+)`)
	wrkP99      = regexp.MustCompile(`\s99%\s+(\S+)`)
)

func parseWrk(r *result, out string) {
	if m := wrkRequests.FindStringSubmatch(out); m != nil {
		r.requests, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := wrkRPS.FindStringSubmatch(out); m != nil {
		r.rps, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		r.non2xx, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := wrkErrors.FindStringSubmatch(out); m != nil {
		for _, v := range m[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			r.non2xx += n
		}
	}
	if m := wrkP50.FindStringSubmatch(out); m != nil {
		r.wrkP50 = m[1]
	}
	if m := wrkP99.FindStringSubmatch(out); m != nil {
		r.wrkP99 = m[1]
	}
}

// fixedRate runs vegeta at rate requests per second over HTTP/1.1 keep-alive, with as many
// connections as wrk uses, and returns its latency percentiles.
func fixedRate(o *options, s scenario, rate int) (fixedResult, error) {
	url, host := target(s)
	targets := filepath.Join(o.work, "targets.txt")
	if err := os.WriteFile(targets, []byte("GET "+url+"\nHost: "+host+"\n"), 0o600); err != nil {
		return fixedResult{}, err
	}
	results := filepath.Join(o.work, "vegeta.bin")
	vegeta := o.vegeta
	//nolint:gosec // runs the benchmark tools with the operator's flags
	attack := exec.CommandContext(context.Background(), "taskset", "-c", o.loadCPU, vegeta, "attack",
		"-targets", targets, "-rate", strconv.Itoa(rate)+"/1s", "-duration", o.duration.String(),
		"-keepalive=true", "-http2=false", "-insecure", "-workers", "32", "-max-workers", "64", "-connections", "64",
		"-output", results)
	if out, err := attack.CombinedOutput(); err != nil {
		return fixedResult{}, fmt.Errorf("vegeta attack: %w: %s", err, out)
	}
	out, err := exec.CommandContext(context.Background(), vegeta, "report", "-type=json", results).Output() //nolint:gosec // the operator's vegeta
	if err != nil {
		return fixedResult{}, fmt.Errorf("vegeta report: %w", err)
	}
	var rep struct {
		Latencies map[string]int64 `json:"latencies"`
		Success   float64          `json:"success"`
		Requests  int64            `json:"requests"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return fixedResult{}, fmt.Errorf("vegeta report: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return fixedResult{
		p50: time.Duration(rep.Latencies["50th"]), p99: time.Duration(rep.Latencies["99th"]),
		failed: int64((1 - rep.Success) * float64(rep.Requests)),
	}, nil
}

// merge folds round r into the result: CPU time per request takes the median of the rounds,
// the rest comes from the first round, which also ran the fixed-rate load.
func (res *result) merge(r result, first bool) {
	rounds := slices.Concat(res.cpuRounds, r.cpuRounds)
	if first {
		*res = r
	}
	res.non2xx += r.non2xx * boolInt(!first)
	res.cpuRounds = rounds
	sorted := slices.Clone(rounds)
	slices.Sort(sorted)
	if n := len(sorted); n%2 == 1 {
		res.cpuUS = sorted[n/2]
	} else {
		res.cpuUS = (sorted[n/2-1] + sorted[n/2]) / 2
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

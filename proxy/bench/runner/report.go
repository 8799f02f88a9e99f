package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

func scaleTarget(i int) (host, path string) { return snaptest.ScaleTarget(i) }

// markdown renders the results: per scenario, each proxy's CPU time per request and its ratio
// to nginx's, closed-loop throughput and latency, and fixed-rate latency.
func markdown(o *options, results []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s/%s, %d CPUs; proxy on CPU %s, wrk/vegeta and backend on CPU %s; "+
		"wrk -t1 -c64 for %s after a %s warm-up, %d rounds interleaved (median CPU time per request); "+
		"vegeta HTTP/1.1 keep-alive, 64 connections, at a fixed rate for %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(),
		o.proxyCPU, o.loadCPU, o.duration, o.warmup, o.rounds, o.duration)
	b.WriteString("| scenario | proxy | CPU/request (rounds) | vs nginx | req/s (wrk) | wrk p50 / p99 | fixed rate | p50 / p99 at fixed rate | errors | RSS |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	nginx := map[string]float64{}
	for _, r := range results {
		if r.proxy == "nginx" {
			nginx[r.scenario] = r.cpuUS
		}
	}
	for _, r := range results {
		ratio := "-"
		if base := nginx[r.scenario]; base > 0 {
			ratio = fmt.Sprintf("**%.2fx**", r.cpuUS/base)
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f us (%s) | %s | %.0f | %s / %s | %d/s | %s / %s | %d | %.0f MiB |\n",
			r.scenario, r.proxy, r.cpuUS, rounds(r.cpuRounds), ratio, r.rps, r.wrkP50, r.wrkP99, r.rate,
			ms(r.fixed.p50), ms(r.fixed.p99), r.non2xx+r.fixed.failed, r.rssMiB)
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

func rounds(us []float64) string {
	parts := make([]string, len(us))
	for i, v := range us {
		parts[i] = fmt.Sprintf("%.1f", v)
	}
	return strings.Join(parts, ", ")
}

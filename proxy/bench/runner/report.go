package main

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

func scaleTarget(i int) (host, path string) { return snaptest.ScaleTarget(i) }

// rssSpreadTarget is how far the data plane's peak RSS may move across the download sizes.
const rssSpreadTarget = 0.10

// report is one run's results.
type report struct {
	o                     *options
	started               time.Time
	loadBefore, loadAfter string
	scenarios             []scenario
	results               []result
	// profiles holds, per scenario above target, the top of coxswain's CPU profile.
	profiles map[string]string
}

func (rep *report) find(scenario, proxy string) (result, bool) {
	for _, r := range rep.results {
		if r.scenario == scenario && r.proxy == proxy {
			return r, true
		}
	}
	return result{}, false
}

// misses returns, per scenario, how coxswain misses its targets there: CPU time per request
// over its multiple of nginx's, p99 at the fixed rate over nginx's, and (on the download with
// the highest peak) peak RSS moving more than 10% across download sizes.
func (rep *report) misses() map[string][]string {
	out := map[string][]string{}
	for _, s := range rep.scenarios {
		c, ok1 := rep.find(s.name, "coxswain")
		n, ok2 := rep.find(s.name, "nginx")
		if !ok1 || !ok2 {
			continue
		}
		// Judged on the ratio as printed, to two decimals.
		if ratio := math.Round(c.cpuUS/n.cpuUS*100) / 100; ratio > s.cpuTarget() {
			out[s.name] = append(out[s.name], fmt.Sprintf("CPU/request %.2fx nginx (target <= %.2fx)", ratio, s.cpuTarget()))
		}
		if c.fixed.p99 > n.fixed.p99 {
			out[s.name] = append(out[s.name], fmt.Sprintf("p99 at %d/s %s against nginx's %s%s", s.rate, ms(c.fixed.p99), ms(n.fixed.p99), shortNote(s, c, n)))
		}
	}
	if spread, lo, hi := rep.rssSpread("coxswain"); spread > rssSpreadTarget {
		out[hi.scenario] = append(out[hi.scenario], fmt.Sprintf("peak RSS %.0f MiB against %.0f MiB in %q: %.0f%% apart (target <= %.0f%%)",
			hi.peakMiB, lo.peakMiB, lo.scenario, spread*100, rssSpreadTarget*100))
	}
	return out
}

// shortNote says which proxies the fixed-rate load could not hold at its rate (its sender
// saturated, so those percentiles hold queueing in the load generator too).
func shortNote(s scenario, rs ...result) string {
	var short []string
	for _, r := range rs {
		if r.fixed.rate < 0.95*float64(s.rate) {
			short = append(short, fmt.Sprintf("%s sent %.0f/s", r.proxy, r.fixed.rate))
		}
	}
	if len(short) == 0 {
		return ""
	}
	return " (rate not held: " + strings.Join(short, ", ") + ")"
}

// rssSpread returns how far proxy's peak RSS moves across the download scenarios, with the
// results holding the lowest and highest.
func (rep *report) rssSpread(proxy string) (spread float64, lo, hi result) {
	first := true
	for _, s := range rep.scenarios {
		if !s.flat {
			continue
		}
		r, ok := rep.find(s.name, proxy)
		if !ok {
			continue
		}
		if first || r.peakMiB < lo.peakMiB {
			lo = r
		}
		if first || r.peakMiB > hi.peakMiB {
			hi = r
		}
		first = false
	}
	if first || lo.peakMiB <= 0 {
		return 0, lo, hi
	}
	return hi.peakMiB/lo.peakMiB - 1, lo, hi
}

// markdown renders the results: per scenario, each proxy's CPU time per request and its ratio
// to nginx's, closed-loop throughput and latency, fixed-rate latency and memory; then the data
// plane against its targets, and the profiles of the scenarios above target.
func (rep *report) markdown() string {
	o := rep.o
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s/%s, %d CPUs; load average (1, 5, 15 min) %s at the start, %s at the end. "+
		"Proxy on CPU %s, load generators and backend on CPU %s; closed loop (wrk -t1 -c64, or h2load -c16 -m4 for HTTP/2) "+
		"for %s after a %s warm-up, %d rounds interleaved (median CPU time per request); fixed rate (vegeta, or h2load "+
		"--rps for HTTP/2) for %s.\n\n",
		rep.started.UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(),
		rep.loadBefore, rep.loadAfter, o.proxyCPU, o.loadCPU, o.duration, o.warmup, o.rounds, o.duration)
	b.WriteString("| scenario | proxy | CPU/request (rounds) | vs nginx | req/s | closed-loop p50 / p99 | fixed rate | p50 / p99 at fixed rate | errors | RSS end / peak | load avg |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.results {
		ratio := "-"
		if n, ok := rep.find(r.scenario, "nginx"); ok && n.cpuUS > 0 {
			ratio = fmt.Sprintf("**%.2fx**", r.cpuUS/n.cpuUS)
		}
		rss := fmt.Sprintf("%.0f / %.0f MiB", r.rssMiB, r.peakMiB)
		if r.idleMiB > 0 {
			rss = fmt.Sprintf("%.0f before, %.0f idle; %s", r.baseMiB, r.idleMiB, rss)
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f us (%s) | %s | %.0f | %s / %s | %.0f/s | %s / %s | %d | %s | %s |\n",
			r.scenario, r.proxy, r.cpuUS, rounds(r.cpuRounds), ratio, r.rps, ms(r.closed.p50), ms(r.closed.p99),
			r.fixed.rate, ms(r.fixed.p50), ms(r.fixed.p99), r.errors, rss, strings.Fields(r.load + " -")[0])
	}
	b.WriteString("\nTargets for coxswain: CPU/request <= 1.10x nginx in every scenario and <= 1.00x with 16 KiB and larger bodies; " +
		"p99 at the fixed rate <= nginx's; peak RSS within 10% from 16 KiB to 100 MiB downloads (64 concurrent transfers).\n\n")
	misses := rep.misses()
	for _, s := range rep.scenarios {
		if m := misses[s.name]; len(m) > 0 {
			fmt.Fprintf(&b, "- **ABOVE TARGET: %s**: %s\n", s.name, strings.Join(m, "; "))
		} else if _, ok := rep.find(s.name, "coxswain"); ok {
			fmt.Fprintf(&b, "- on target: %s\n", s.name)
		}
	}
	for _, proxy := range []string{"nginx", "coxswain"} {
		if spread, lo, hi := rep.rssSpread(proxy); hi.peakMiB > 0 {
			fmt.Fprintf(&b, "- peak RSS across downloads, %s: %.0f MiB (%s) to %.0f MiB (%s), %.0f%% apart\n",
				proxy, lo.peakMiB, lo.scenario, hi.peakMiB, hi.scenario, spread*100)
		}
	}
	for _, s := range rep.scenarios {
		for _, proxy := range []string{"nginx", "coxswain"} {
			if r, ok := rep.find(s.name, proxy); ok && s.idle > 0 {
				fmt.Fprintf(&b, "- holding %d idle keep-alive connections, %s: %.0f MiB RSS, %.1f KiB per connection over its %.0f MiB before them\n",
					s.idle, proxy, r.idleMiB, (r.idleMiB-r.baseMiB)*1024/float64(s.idle), r.baseMiB)
			}
		}
	}
	for _, s := range rep.scenarios {
		if text := rep.profiles[s.name]; text != "" {
			fmt.Fprintf(&b, "\n#### CPU profile of coxswain: %s\n\n```\n%s```\n", s.name, text)
		}
	}
	return b.String()
}

func ms(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	if d >= 10*time.Second {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000)
}

func rounds(us []float64) string {
	parts := make([]string, len(us))
	for i, v := range us {
		parts[i] = fmt.Sprintf("%.1f", v)
	}
	return strings.Join(parts, ", ")
}

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

// Targets of the data plane besides CPU time per request (scenario.cpuTarget).
const (
	// idleTargetKiB is the most an idle keep-alive connection may hold, read idleSettle after
	// the connections opened.
	idleTargetKiB = 4.0
	// writesTarget and readsTarget are the most system calls per 100 B request that write
	// and read data (EAGAIN reads included). They are judged to one decimal: the requests in
	// flight when the traced run stops (up to 64) made calls but are not counted as requests,
	// which adds about 0.01 per request to every proxy, nginx included.
	writesTarget, readsTarget = 2.0, 3.0
)

// round2 rounds to two decimals: targets are judged on figures as printed.
func round2(v float64) float64 { return math.Round(v*100) / 100 }

// round1 rounds to one decimal.
func round1(v float64) float64 { return math.Round(v*10) / 10 }

// misses returns, per scenario and coxswain proxy, how it misses its targets there: CPU time
// per request (closed loop or fixed rate) over its multiple of nginx's, p99 at the fixed rate
// over nginx's, the memory of an idle connection over 4 KiB, system calls per request over 2
// writes and 3 reads (100 B) or 2 writes (16 KiB), and (on the download with the highest
// peak) peak RSS moving more than 10% across download sizes.
func (rep *report) misses() map[string]map[string][]string {
	out := map[string]map[string][]string{}
	add := func(scenario, proxy, miss string) {
		if out[scenario] == nil {
			out[scenario] = map[string][]string{}
		}
		out[scenario][proxy] = append(out[scenario][proxy], miss)
	}
	for _, s := range rep.scenarios {
		n, ok := rep.find(s.name, "nginx")
		if !ok {
			continue
		}
		for _, proxy := range coxswains {
			c, ok := rep.find(s.name, proxy)
			if !ok {
				continue
			}
			for _, m := range scenarioMisses(s, c, n) {
				add(s.name, proxy, m)
			}
		}
	}
	for _, proxy := range coxswains {
		if spread, lo, hi := rep.rssSpread(proxy); spread > rssSpreadTarget {
			add(hi.scenario, proxy, fmt.Sprintf("peak RSS %.0f MiB against %.0f MiB in %q: %.0f%% apart (target <= %.0f%%)",
				hi.peakMiB, lo.peakMiB, lo.scenario, spread*100, rssSpreadTarget*100))
		}
	}
	return out
}

// scenarioMisses returns how c misses its targets in s against nginx's result n.
func scenarioMisses(s scenario, c, n result) []string {
	var out []string
	if ratio := round2(c.cpuUS / n.cpuUS); ratio > s.cpuTarget() {
		out = append(out, fmt.Sprintf("CPU/request %.2fx nginx (target <= %.2fx)", ratio, s.cpuTarget()))
	}
	if ratio := round2(c.fixedCPUUS / n.fixedCPUUS); ratio > s.cpuTarget() {
		out = append(out, fmt.Sprintf("CPU/request at %d/s %.2fx nginx (target <= %.2fx)", s.rate, ratio, s.cpuTarget()))
	}
	if c.fixed.p99 > n.fixed.p99 {
		out = append(out, fmt.Sprintf("p99 at %d/s %s against nginx's %s%s", s.rate, ms(c.fixed.p99), ms(n.fixed.p99), shortNote(s, c, n)))
	}
	if s.idle > 0 {
		if kib := round2(c.idle.perConn(c.idle.settledMiB)); kib > idleTargetKiB {
			out = append(out, fmt.Sprintf("%.2f KiB per idle connection %s after opening (target <= %.0f KiB)", kib, idleSettle, idleTargetKiB))
		}
	}
	if c.sys != nil {
		if round1(c.sys.writes) > writesTarget {
			out = append(out, fmt.Sprintf("%.2f writes per request (target <= %.0f)", c.sys.writes, writesTarget))
		}
		if s.body < 16*kib && round1(c.sys.reads) > readsTarget {
			out = append(out, fmt.Sprintf("%.2f reads per request (target <= %.0f)", c.sys.reads, readsTarget))
		}
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

// markdown renders the results: per scenario, each proxy's CPU time per request in the closed
// loop and at the fixed rate with their ratios to nginx's, throughput, latency and memory;
// then the idle connections' memory and the system calls per request; then each coxswain
// proxy against its targets, and the profiles of the scenarios above target.
func (rep *report) markdown() string {
	o := rep.o
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s/%s, %d CPUs; load average (1, 5, 15 min) %s at the start, %s at the end. "+
		"Proxy on CPU %s, load generators and backend on CPU %s; closed loop (wrk -t1 -c64, or h2load -c16 -m4 for HTTP/2) "+
		"for %s after a %s warm-up, then fixed rate (vegeta, or h2load --rps for HTTP/2) for %s, %d rounds interleaved "+
		"(median CPU time per request of the rounds; latency from the first).\n\n",
		rep.started.UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(),
		rep.loadBefore, rep.loadAfter, o.proxyCPU, o.loadCPU, o.duration, o.warmup, o.duration, o.rounds)
	rep.mainTable(&b)
	rep.idleTable(&b)
	rep.syscallTable(&b)
	rep.targets(&b)
	for _, s := range rep.scenarios {
		if text := rep.profiles[s.name]; text != "" {
			fmt.Fprintf(&b, "\n#### CPU profile of %s: %s\n\n```\n%s```\n", profiled, s.name, text)
		}
	}
	return b.String()
}

// ratio formats a/b as a bold multiple, or "-" when b is not a figure.
func ratio(a, b float64) string {
	if b <= 0 || a <= 0 {
		return "-"
	}
	return fmt.Sprintf("**%.2fx**", a/b)
}

func (rep *report) mainTable(b *strings.Builder) {
	b.WriteString("| scenario | proxy | CPU/request, closed loop (rounds) | vs nginx | CPU/request at fixed rate (rounds) | vs nginx | " +
		"req/s | closed-loop p50 / p99 | fixed rate | p50 / p99 at fixed rate | p99 vs nginx | errors | RSS end / peak | load avg |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.results {
		n, _ := rep.find(r.scenario, "nginx")
		fmt.Fprintf(b, "| %s | %s | %.1f us (%s) | %s | %.1f us (%s) | %s | %.0f | %s / %s | %.0f/s | %s / %s | %s | %d | %.0f / %.0f MiB | %s |\n",
			r.scenario, r.proxy, r.cpuUS, rounds(r.cpuRounds), ratio(r.cpuUS, n.cpuUS),
			r.fixedCPUUS, rounds(r.fixedRounds), ratio(r.fixedCPUUS, n.fixedCPUUS),
			r.rps, ms(r.closed.p50), ms(r.closed.p99), r.fixed.rate, ms(r.fixed.p50), ms(r.fixed.p99),
			ratio(float64(r.fixed.p99), float64(n.fixed.p99)), r.errors, r.rssMiB, r.peakMiB, strings.Fields(r.load + " -")[0])
	}
}

// idleTable renders the memory of the idle connections, in the scenarios that hold some.
func (rep *report) idleTable(b *strings.Builder) {
	header := false
	for _, r := range rep.results {
		if r.idle.conns == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(b, "\nIdle keep-alive connections (each made one request, then held open), resident set before them, "+
				"once they are all open, and %s later; the target is judged on the last reading.\n\n", idleSettle)
			b.WriteString("| scenario | proxy | connections | RSS before | RSS at once | RSS " + idleSettle.String() + " later | " +
				"KiB/connection at once | KiB/connection " + idleSettle.String() + " later | vs nginx |\n")
			b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
			header = true
		}
		n, _ := rep.find(r.scenario, "nginx")
		m := r.idle
		fmt.Fprintf(b, "| %s | %s | %d | %.1f MiB | %.1f MiB | %.1f MiB | %.2f | %.2f | %s |\n",
			r.scenario, r.proxy, m.conns, m.baseMiB, m.openMiB, m.settledMiB, m.perConn(m.openMiB), m.perConn(m.settledMiB),
			ratio(m.perConn(m.settledMiB), n.idle.perConn(n.idle.settledMiB)))
	}
}

// syscallTable renders the system calls per request, in the scenarios that count them.
func (rep *report) syscallTable(b *strings.Builder) {
	header := false
	for _, r := range rep.results {
		if r.sys == nil {
			continue
		}
		if !header {
			b.WriteString("\nSystem calls per request, strace -f on the proxy over a closed-loop run (strace slows the proxy: " +
				"the counts are the figure, not the time); writes: write, writev, sendto, sendmsg, sendfile; reads: read, readv, " +
				"recvfrom, recvmsg, with those that returned EAGAIN apart.\n\n")
			b.WriteString("| scenario | proxy | requests traced | writes | reads | of which EAGAIN | other calls | total | total vs nginx | most frequent other calls |\n")
			b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
			header = true
		}
		c := *r.sys
		n, _ := rep.find(r.scenario, "nginx")
		vs := "-"
		if n.sys != nil {
			vs = ratio(c.total(), n.sys.total())
		}
		fmt.Fprintf(b, "| %s | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s |\n",
			r.scenario, r.proxy, c.requests, c.writes, c.reads, c.eagain, c.other, c.total(), vs, c.top)
	}
}

// targets renders each coxswain proxy's standing against its targets.
func (rep *report) targets(b *strings.Builder) {
	fmt.Fprintf(b, "\nTargets for coxswain: CPU/request <= 1.10x nginx in every scenario, <= 1.00x with 16 KiB and larger bodies "+
		"and <= 1.50x over HTTP/2, in the closed loop and at the fixed rate; p99 at the fixed rate <= nginx's; peak RSS within 10%% from 16 KiB to 100 MiB "+
		"downloads (64 concurrent transfers); <= %.0f KiB per idle connection %s after they opened; <= %.0f writes and <= %.0f reads "+
		"per 100 B request, <= %.0f writes per 16 KiB request (system calls judged to one decimal).\n\n", idleTargetKiB, idleSettle, writesTarget, readsTarget, writesTarget)
	misses := rep.misses()
	for _, s := range rep.scenarios {
		for _, proxy := range coxswains {
			if _, ok := rep.find(s.name, proxy); !ok {
				continue
			}
			if m := misses[s.name][proxy]; len(m) > 0 {
				fmt.Fprintf(b, "- **ABOVE TARGET: %s, %s**: %s\n", s.name, proxy, strings.Join(m, "; "))
			} else {
				fmt.Fprintf(b, "- on target: %s, %s\n", s.name, proxy)
			}
		}
	}
	for _, proxy := range append([]string{"nginx"}, coxswains...) {
		if spread, lo, hi := rep.rssSpread(proxy); hi.peakMiB > 0 {
			fmt.Fprintf(b, "- peak RSS across downloads, %s: %.0f MiB (%s) to %.0f MiB (%s), %.0f%% apart\n",
				proxy, lo.peakMiB, lo.scenario, hi.peakMiB, hi.scenario, spread*100)
		}
	}
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

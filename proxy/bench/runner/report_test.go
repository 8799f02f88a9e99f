package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The report judges each engine against every target from the figures of the same run.
func TestMisses(t *testing.T) {
	idle := scenario{name: "idle", body: 100, idle: 10000, rate: 4000}
	small := scenario{name: "small", body: 100, rate: 4000, syscalls: true}
	nginx := func(s scenario) result {
		r := result{scenario: s.name, proxy: "nginx", cpuUS: 10, fixedCPUUS: 20, fixed: loadResult{p99: 5 * time.Millisecond, rate: 4000}}
		if s.idle > 0 {
			r.idle = idleMemory{conns: s.idle, baseMiB: 8, openMiB: 20, settledMiB: 20}
		}
		if s.syscalls {
			r.sys = &syscallCounts{requests: 1000, writes: 2, reads: 2}
		}
		return r
	}
	rep := report{
		o:         &options{},
		scenarios: []scenario{idle, small},
		results: []result{
			nginx(idle),
			{
				// On target: 1.10x in the closed loop, 1.05x at the fixed rate, the same p99,
				// 4 KiB per connection once settled (more at once does not count), system calls
				// within the targets to one decimal.
				scenario: "idle", proxy: coxswainNative, cpuUS: 11, fixedCPUUS: 21, fixed: loadResult{p99: 5 * time.Millisecond, rate: 4000},
				idle: idleMemory{conns: 10000, baseMiB: 15, openMiB: 200, settledMiB: 15 + 4*10000/1024.0},
				sys:  &syscallCounts{requests: 1000, writes: 2.04, reads: 3.04},
			},
			{
				scenario: "idle", proxy: coxswainNetHTTP, cpuUS: 30, fixedCPUUS: 25, fixed: loadResult{p99: 6 * time.Millisecond, rate: 3000},
				idle: idleMemory{conns: 10000, baseMiB: 15, openMiB: 230, settledMiB: 223},
			},
			nginx(small),
			{
				scenario: "small", proxy: coxswainNative, cpuUS: 10, fixedCPUUS: 20, fixed: loadResult{p99: time.Millisecond, rate: 4000},
				sys: &syscallCounts{requests: 1000, writes: 2.05, reads: 3.5, eagain: 1.5},
			},
		},
	}
	misses := rep.misses()
	if got := misses["idle"][coxswainNative]; len(got) != 0 {
		t.Errorf("native in idle: misses %q, want none", got)
	}
	got := misses["idle"][coxswainNetHTTP]
	for _, want := range []string{"CPU/request 3.00x", "CPU/request at 4000/s 1.25x", "p99 at 4000/s 6.00ms against nginx's 5.00ms (rate not held: coxswain-nethttp sent 3000/s)", "21.30 KiB per idle connection"} {
		if !slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, want) }) {
			t.Errorf("nethttp in idle: misses %q, want one starting %q", got, want)
		}
	}
	got = misses["small"][coxswainNative]
	if len(got) != 2 || !strings.HasPrefix(got[0], "2.05 writes") || !strings.HasPrefix(got[1], "3.50 reads") {
		t.Errorf("native in small: misses %q, want the writes and the reads", got)
	}
	text := rep.markdown()
	for _, want := range []string{
		"| idle | coxswain-nethttp | 10000 | 15.0 MiB | 230.0 MiB | 223.0 MiB | 22.02 | 21.30 | **17.33x** |",
		"| small | coxswain-native | 1000 | 2.05 | 3.50 | 1.50 | 0.00 | 5.55 | **1.39x** |",
		"- on target: idle, coxswain-native",
		"- **ABOVE TARGET: small, coxswain-native**",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
}

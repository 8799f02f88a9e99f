package main

import (
	"slices"
	"testing"
)

// -only keeps nginx, the baseline, and a name keeps its variants.
func TestFilter(t *testing.T) {
	all := []string{"nginx", "haproxy", "nethttp-minimal", coxswainNative, coxswainNetHTTP, coxswainAccessLog}
	for only, want := range map[string][]string{
		"":                         all,
		"coxswain":                 {"nginx", coxswainNative, coxswainNetHTTP, coxswainAccessLog},
		"coxswain-native":          {"nginx", coxswainNative, coxswainAccessLog},
		"coxswain-nethttp,haproxy": {"nginx", "haproxy", coxswainNetHTTP},
		"nethttp":                  {"nginx", "nethttp-minimal"},
	} {
		o := options{only: only}
		if got := o.filter(all); !slices.Equal(got, want) {
			t.Errorf("-only %q: %v, want %v", only, got, want)
		}
	}
}

func TestCoxswainEngine(t *testing.T) {
	for name, want := range map[string]struct {
		engine    string
		accessLog bool
	}{
		coxswainNative:    {"native", false},
		coxswainNetHTTP:   {"nethttp", false},
		coxswainAccessLog: {"native", true},
	} {
		engine, accessLog := coxswainEngine(name)
		if engine != want.engine || accessLog != want.accessLog {
			t.Errorf("%s: engine %q, access log %v; want %q, %v", name, engine, accessLog, want.engine, want.accessLog)
		}
	}
}

func TestCPUTarget(t *testing.T) {
	want := map[string]float64{
		"1 route, 100 B": 1.10, "10,000 routes, 100 B": 1.10, "1 route, 16 KiB": 1.00, "1 route, 100 MiB download": 1.00,
		"1 route, 1 MiB upload": 1.00, "1 route, 100 MiB upload": 1.00, "1 route, 100 B, TLS": 1.10,
		"1 route, 100 B, HTTP/2 over TLS": 1.50, "1 route, 100 B, 10,000 idle connections": 1.10,
	}
	for _, s := range scenarios() {
		if w, ok := want[s.name]; ok && s.cpuTarget() != w {
			t.Errorf("%s: target %.2fx, want %.2fx", s.name, s.cpuTarget(), w)
		}
		delete(want, s.name)
	}
	if len(want) > 0 {
		t.Errorf("no scenario named %v", want)
	}
}

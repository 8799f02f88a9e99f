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

package conformance

import (
	"slices"
	"testing"

	"coxswain.dev/coxswain/api/v1alpha1"
)

// Tests that the shared pool's arguments get exactly one engine flag, the one asked for,
// whatever they had before.
func TestWithEngineLeavesOneEngineFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"an argument list without the flag gets it", []string{"--a=1"}, []string{"--a=1", "--http1-engine=native"}},
		{"a flag already there is replaced", []string{"--http1-engine=nethttp", "--a=1"}, []string{"--a=1", "--http1-engine=native"}},
		{"repeated flags leave one", []string{"--http1-engine=nethttp", "--http1-engine=native"}, []string{"--http1-engine=native"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.args)
			if got := WithEngine(in, v1alpha1.HTTP1EngineNative); !slices.Equal(got, tc.want) {
				t.Errorf("WithEngine(%q) = %q, want %q", tc.args, got, tc.want)
			}
			if !slices.Equal(in, tc.args) {
				t.Errorf("WithEngine changed its argument to %q", in)
			}
		})
	}
	if _, err := ParseEngine("fast"); err == nil {
		t.Error("ParseEngine accepted an unknown engine")
	}
}
